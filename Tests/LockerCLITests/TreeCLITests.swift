import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `put -r` and `get -r` through the real binary: many small files go in
/// batches, large ones one at a time; classes are inherited as for single
/// puts; the fetched tree equals the original; nothing temporary is left.
@Suite("locker put -r and get -r, end to end")
struct TreeCLITests {
    /// A local tree: 300 small files in /many, a nested directory, an
    /// empty one, and one 5 MiB file (stored alone, between two batches).
    /// `largeTreeFetchCommitsInGroupsAndFailsCleanly` stores a tree in
    /// several batches.
    private func makeTree(_ root: String, version: Int) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for i in 0..<300 { files["many/f\(i)"] = sampleBytes("v\(version)-many-\(i)", size: 1 + (i * 131) % 16_000) }
        for i in 0..<20 { files["secret/deeper/s\(i)"] = sampleBytes("v\(version)-secret-\(i)", size: 100 + i) }
        files["big.bin"] = pseudoRandomBytes(5 << 20, seed: UInt64(version))
        files["empty-file"] = Data()
        for (path, data) in files {
            let full = root + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: full, contents: data))
        }
        try FileManager.default.createDirectory(atPath: root + "/empty-dir", withIntermediateDirectories: true)
        return files
    }

    /// A new store holding ``makeTree(_:version:)`` at /t; returns its files.
    private func storedTree(_ f: CLIFixture, version: Int) throws -> [String: Data] {
        try f.initialize()
        let files = try makeTree(f.root + "/tree", version: version)
        try f.ok(["put", "-r", f.root + "/tree", "/t"])
        return files
    }

    /// A new store with `storeDirectory` and its `secret` subdirectory of
    /// class A, and ``makeTree(_:version:)`` built locally (not stored).
    private func treeBeside(_ f: CLIFixture, storeDirectory: String, version: Int) throws -> (local: String, files: [String: Data]) {
        try f.initialize()
        try f.ok(["mkdir", storeDirectory])
        try f.ok(["mkdir", storeDirectory + "/secret", "--class", "A"])
        let local = f.root + "/tree"
        return (local, try makeTree(local, version: version))
    }

    /// A new store, a local directory `<root>/<name>` holding the empty
    /// `subdirectory`, and an empty `<root>/outside` for links to lead to.
    private func treeBesideOutside(_ f: CLIFixture, _ name: String, subdirectory: String) throws -> (local: String, outside: String) {
        try f.initialize()
        let local = f.root + "/" + name
        let outside = f.root + "/outside"
        try FileManager.default.createDirectory(atPath: local + "/" + subdirectory, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        return (local, outside)
    }

    private func localFiles(_ root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? []).sorted()
    }

    @Test func treeRoundTripWithBatchesAndInheritance() throws {
        try withStoreFixture { f in
            let (local, files) = try treeBeside(f, storeDirectory: "/t", version: 1)

            let put = try f.ok(["put", "-r", local, "/t"])
            #expect(put.stdout.contains("Stored \(files.count) objects under /t."), "\(put)")
            #expect(try f.stat("/t/secret/deeper/s3").protection == "complete")
            #expect(try f.stat("/t/secret/deeper/s3").protectionSource == "inherited:/t/secret")
            #expect(try f.stat("/t/many/f7").protection == "completeUntilFirstUserAuthentication")
            #expect(try f.stat("/t/empty-dir").type == "directory")
            #expect(f.storedData().count == files.count)

            let out = f.root + "/out"
            let get = try f.ok(["get", "-r", "/t", out])
            #expect(get.stdout.contains("Fetched \(files.count) objects into \(out)."), "\(get)")
            for (path, data) in files {
                #expect(FileManager.default.contents(atPath: out + "/" + path) == data, "\(path)")
            }
            #expect(localFiles(out).filter { $0.contains(".locker-") }.isEmpty)
            #expect(localFiles(f.root).filter { $0.contains(".locker-") }.isEmpty)
            #expect(try f.raw(["verify", "--read-data"]).status == 0)

            // Again with new contents: every object replaced, the old data
            // gone, the explicit class applied to every file.
            try FileManager.default.removeItem(atPath: local)
            let second = try makeTree(local, version: 2)
            try f.ok(["put", "-r", local, "/t", "--class", "D"])
            #expect(try f.stat("/t/secret/deeper/s3").protection == "none")
            #expect(f.storedData().count == second.count)
            try FileManager.default.removeItem(atPath: out)
            try f.ok(["get", "-r", "/t", out])
            for (path, data) in second {
                #expect(FileManager.default.contents(atPath: out + "/" + path) == data, "\(path)")
            }
            #expect(try f.raw(["verify", "--read-data"]).status == 0)
        }
    }

    /// A new DEST may end in "/" and may need parents; an existing file
    /// in the way, or a DEST created meanwhile, is refused without a trace.
    @Test func treeFetchIntoNewDirectoryEdges() throws {
        try withStoreFixture { f in
            let files = try storedTree(f, version: 3)

            let nested = f.root + "/a/b/out/"
            let get = try f.ok(["get", "-r", "/t", nested])
            #expect(get.stdout.contains("Fetched \(files.count) objects"), "\(get)")
            for (path, data) in files {
                #expect(FileManager.default.contents(atPath: nested + path) == data, "\(path)")
            }
            #expect(localFiles(f.root + "/a").filter { $0.contains(".locker-") }.isEmpty)

            // A file where the directory should go.
            let blocked = f.root + "/blocked"
            #expect(FileManager.default.createFile(atPath: blocked, contents: Data("keep".utf8)))
            let refused = try f.raw(["get", "-r", "/t", blocked])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr == "locker: error: cannot write into \(blocked): it exists and is not a directory\n", "\(refused)")
            // The same below it, and for export.
            let below = try f.raw(["get", "-r", "/t", blocked + "/sub"])
            #expect(below.status == 1 && below.stderr == refused.stderr, "\(below)")
            let export = try f.raw(["export", blocked])
            #expect(export.status == 1 && export.stderr == refused.stderr, "\(export)")
            #expect(FileManager.default.contents(atPath: blocked) == Data("keep".utf8))
            #expect(localFiles(f.root).filter { $0.contains(".locker-") }.isEmpty)
        }
    }

    /// Into an existing tree, a waiting file keeps its directory open
    /// until its commit: with a low open-file limit, the files of many
    /// directories are committed in more groups instead of running out of
    /// descriptors.
    @Test func treeFetchOfManyDirectoriesKeepsWithinALowDescriptorLimit() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/tree"
            let dest = f.root + "/dest"
            for i in 0..<400 {
                try FileManager.default.createDirectory(atPath: local + "/d\(i)", withIntermediateDirectories: true)
                try FileManager.default.createDirectory(atPath: dest + "/d\(i)", withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: local + "/d\(i)/f", contents: Data("file \(i)".utf8)))
            }
            try f.ok(["put", "-r", local, "/t"])
            // Soft and hard limit both (the command cannot raise it), below
            // what 128 directories held open at once would need.
            let fetched = try f.runProgram("/bin/sh", ["-c", "ulimit -n 120 && exec \"$0\" \"$@\"", CLIFixture.lockerPath,
                                                       "get", "-r", "/t", dest], timeout: 120)
            #expect(fetched.status == 0, "\(fetched)")
            #expect(fetched.stdout.contains("Fetched 400 objects into \(dest)."), "\(fetched)")
            for i in [0, 199, 399] {
                #expect(FileManager.default.contents(atPath: dest + "/d\(i)/f") == Data("file \(i)".utf8))
            }
            #expect(localFiles(dest).allSatisfy { !$0.contains(".locker-") })
        }
    }

    /// Small files out of the page cache (dropped from it, as memory
    /// pressure or proactive reclaim leaves them), prepared ahead of their
    /// writers, are stored as they are, under a low open-file limit (the
    /// lowest that still prepares files): the descriptor a prepared file
    /// holds is the one its read uses and closes. Stored as a new tree
    /// (its small files one batch, its larger ones after it), then again
    /// over it (batches of small files and data files together).
    @Test func putOfFilesOutOfThePageCacheKeepsWithinTheDescriptorLimit() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/cold"
            var files: [String: Data] = [:]
            // One file in three has a data file of its own (over the
            // inline limit, incompressible): batches of as many data files
            // as the limit allows, and small files between them.
            for i in 0..<1200 {
                files["s\(i % 3)/f\(i)"] = i % 3 == 0 ? pseudoRandomBytes(60_000, seed: UInt64(i))
                    : sampleBytes("cold-\(i)", size: 1 + (i * 977) % 16_000)
            }
            for (path, data) in files {
                let full = local + "/" + path
                try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: full, contents: data))
            }
            sync()
            for round in ["new", "over"] {
                for path in files.keys {
                    let fd = open(local + "/" + path, O_RDONLY)
                    try #require(fd >= 0)
                    _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
                    close(fd)
                }
                try #require(try StoreCLITests.bytesInPageCache(local + "/s1/f1") == 0, "the file system kept a dropped file in memory")
                // Soft and hard limit both: 272 descriptors beyond the 128
                // left for the rest, 128 of them for prepared files
                // (`Put.descriptorBudget()`).
                let put = try f.runProgram("/bin/sh", ["-c", "ulimit -n 400 && exec \"$0\" \"$@\"", CLIFixture.lockerPath,
                                                       "put", "-r", local, "/c"], timeout: 120)
                #expect(put.status == 0, "\(round): \(put)")
                #expect(put.stdout.contains("Stored 1200 objects under /c."), "\(round): \(put)")
                try f.ok(["get", "-r", "/c", f.root + "/back-" + round])
                for (path, data) in files {
                    #expect(FileManager.default.contents(atPath: f.root + "/back-\(round)/" + path) == data, "\(round): \(path)")
                }
            }
            #expect(try f.ok(["verify"]).status == 0)
        }
    }

    /// A fetch into a one-character name relative to the working
    /// directory works (a single object, and a tree); a new DEST named "."
    /// or ".." below a missing directory, or an empty DEST, is refused
    /// before anything is fetched, with nothing left behind.
    @Test func fetchIntoShortAndDotNames() throws {
        try withStoreFixture { f in
            let files = try storedTree(f, version: 5)
            let work = f.root + "/work"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            func inWork(_ arguments: [String]) throws -> CLIResult {
                try f.runProgram("/bin/sh", ["-c", "cd \"$0\" && exec \"$@\"", work, CLIFixture.lockerPath] + arguments)
            }
            let single = try inWork(["get", "/t/big.bin", "x"])
            #expect(single.status == 0, "\(single)")
            #expect(FileManager.default.contents(atPath: work + "/x") == files["big.bin"])
            let tree = try inWork(["get", "-r", "/t", "y"])
            #expect(tree.status == 0, "\(tree)")
            #expect(FileManager.default.contents(atPath: work + "/y/big.bin") == files["big.bin"])
            for name in [".", ".."] {
                let refused = try inWork(["get", "-r", "/t", "q/" + name])
                #expect(refused.status == 1, "\(refused)")
                #expect(refused.stderr == "locker: error: cannot create directory q/\(name): the name of a new directory cannot be \(name)\n", "\(refused)")
            }
            let empty = try inWork(["get", "-r", "/t", ""])
            #expect(empty.status == 64 && empty.stderr.contains("-r needs a local directory as DEST"), "\(empty)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: work).sorted() == ["x", "y"])
        }
    }

    /// A destination its user may write into but not list (a drop box:
    /// another owner's, mode 0733) takes `get -r` and `get`. The directory
    /// cannot be synced through, so the fetch syncs through a directory or
    /// file of its own there. With files only, and with a directory built
    /// out of sight; into a new directory there; and again over the same
    /// names.
    @Test(.enabled(if: OtherUser.isPossible, OtherUser.needs))
    func fetchIntoADropBox() throws {
        try withOtherUser { f, other in
            let home = other.home
            try other.files(["src/a": Data("top".utf8), "src/d/b": Data("below".utf8)])
            let drop = f.root + "/drop"
            #expect(mkdir(drop, 0o733) == 0 && chmod(drop, 0o733) == 0)
            func locker(_ arguments: [String]) throws -> CLIResult { try other.locker(arguments) }
            let stored = try locker(["put", "-r", home + "/src", "/s"])
            try #require(stored.status == 0, "\(stored)")
            // Root reads any directory; uid 65534 cannot list this one, so
            // the fetches below open it with O_PATH.
            let listing = try other.run("/bin/ls", [drop])
            try #require(listing.status != 0, "uid 65534 can list the drop box: \(listing)")

            func contents(_ path: String) -> String? {
                FileManager.default.contents(atPath: drop + "/" + path).map { String(decoding: $0, as: UTF8.self) }
            }
            // Files only (each renamed into the drop box).
            let files = try locker(["get", "-r", "/s/d", drop])
            #expect(files.status == 0 && files.stderr.isEmpty, "\(files)")
            #expect(contents("b") == "below")
            // A file and a directory built out of sight; then again, over
            // what is there now.
            for round in ["first", "again"] {
                let tree = try locker(["get", "-r", "/s", drop])
                #expect(tree.status == 0 && tree.stderr.isEmpty, "\(round): \(tree)")
                #expect(contents("a") == "top" && contents("d/b") == "below", "\(round)")
            }
            let newTree = try locker(["get", "-r", "/s", drop + "/new"])
            #expect(newTree.status == 0, "\(newTree)")
            #expect(contents("new/d/b") == "below")
            let single = try locker(["get", "/s/a", drop + "/single"])
            #expect(single.status == 0, "\(single)")
            #expect(contents("single") == "top")
            // Nothing temporary is left behind.
            #expect(try FileManager.default.contentsOfDirectory(atPath: drop).sorted() == ["a", "b", "d", "new", "single"])
            #expect(try FileManager.default.contentsOfDirectory(atPath: drop + "/d") == ["b"])
        }
    }

    /// Into an existing directory: files in existing local directories
    /// are replaced, other local files stay, and each missing directory
    /// is built out of sight and appears whole (empty ones included),
    /// with the mode of a new directory; an existing local directory
    /// keeps its own. A file where a directory goes fails the fetch, and
    /// then none of the directories being built appears.
    @Test func treeFetchIntoExistingDirectory() throws {
        try withStoreFixture { f in
            let files = try storedTree(f, version: 4)

            let out = f.root + "/out"
            try FileManager.default.createDirectory(atPath: out + "/secret", withIntermediateDirectories: true)
            #expect(chmod(out + "/secret", 0o750) == 0)
            #expect(FileManager.default.createFile(atPath: out + "/secret/mine", contents: Data("mine".utf8)))
            #expect(FileManager.default.createFile(atPath: out + "/big.bin", contents: Data("old".utf8)))
            let get = try f.ok(["get", "-r", "/t", out])
            #expect(get.stdout.contains("Fetched \(files.count) objects into \(out)."), "\(get)")
            for (path, data) in files {
                #expect(FileManager.default.contents(atPath: out + "/" + path) == data, "\(path)")
            }
            #expect(FileManager.default.contents(atPath: out + "/secret/mine") == Data("mine".utf8))
            var isDirectory: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: out + "/empty-dir", isDirectory: &isDirectory) && isDirectory.boolValue)
            var st = stat()
            #expect(stat(out + "/secret", &st) == 0 && st.st_mode & 0o777 == 0o750)
            let mask = umask(0); umask(mask)
            #expect(stat(out + "/many", &st) == 0 && st.st_mode & 0o777 == 0o777 & ~mask)
            #expect(localFiles(out).filter { $0.contains(".locker-") }.isEmpty)

            // A file where /t/secret/deeper goes: the fetch fails, and
            // neither /many nor /empty-dir, built before, appears, nor
            // the files written before (under 4,096, not yet committed).
            let again = f.root + "/again"
            try FileManager.default.createDirectory(atPath: again + "/secret", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: again + "/secret/deeper", contents: Data("in the way".utf8)))
            let refused = try f.raw(["get", "-r", "/t", again])
            #expect(refused.status == 1 && refused.stderr.contains("cannot write into \(again)/secret/deeper"), "\(refused)")
            #expect(localFiles(again) == ["secret", "secret/deeper"], "\(localFiles(again))")
            #expect(FileManager.default.contents(atPath: again + "/secret/deeper") == Data("in the way".utf8))
        }
    }

    @Test func treeFetchWhileLockedFailsCleanly() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/t"])
            try f.ok(["mkdir", "/t/secret", "--class", "A"])
            let local = f.root + "/tree"
            _ = try makeTree(local, version: 1)
            try f.ok(["put", "-r", local, "/t"])
            try f.ok(["lock", "--now"])
            let out = f.root + "/out"
            let rootBefore = localFiles(f.root)
            let get = try f.raw(["get", "-r", "/t", out])
            expectProtectedDataUnavailable(get)
            // A new DEST appears whole or not at all: nothing is left,
            // not even the temporary directory it was built in.
            #expect(!FileManager.default.fileExists(atPath: out))
            #expect(localFiles(f.root) == rootBefore)

            // Into an existing DEST: files already fetched are whole, and
            // nothing temporary is left.
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let into = try f.raw(["get", "-r", "/t", out])
            expectProtectedDataUnavailable(into)
            #expect(localFiles(out).filter { $0.contains(".locker-") }.isEmpty)
            // (Fewer than 4,096 files wait for one commit, so none is
            // renamed in here; largeTreeFetchCommitsInGroupsAndFailsCleanly
            // fails after a commit.)
            for path in localFiles(out + "/many") {
                let i = Int(path.dropFirst())!
                #expect(FileManager.default.contents(atPath: out + "/many/" + path) == sampleBytes("v1-many-\(i)", size: 1 + (i * 131) % 16_000))
            }
            // A put -r of class A files while locked is refused, and
            // stores nothing.
            let before = f.storedData()
            let headersBefore = f.headerFiles().count
            let refused = try f.raw(["put", "-r", local + "/secret", "/t/secret2", "--class", "A"])
            expectProtectedDataUnavailable(refused)
            #expect(f.storedData() == before && f.headerFiles().count == headersBefore)
            // /t/secret2 was new: the directories built for it are gone too.
            #expect(try f.raw(["stat", "/t/secret2"]).status == 66)
            #expect(localFiles(f.store).filter { $0.contains(".tmp-") }.isEmpty)
        }
    }

    /// Another command changes the store where `put -r` is building a new
    /// directory out of sight: it creates that directory (73), or removes
    /// and makes again the directory it goes into (66, a new directory ID
    /// under which the built one's sealed name would not open). The import
    /// stops and stores nothing there, the other command's work stays as
    /// it made it, the store verifies, and running the import again
    /// stores everything.
    @Test(arguments: [
        (["mkdir", "/p/x"], Int32(73), "another command created /p/x meanwhile, and nothing was stored under it"),
        (["rm", "-r", "/p"], Int32(66), "another command removed or replaced /p meanwhile, and nothing was stored below it"),
    ])
    func treeIntoNewPathChangedMeanwhile(interference: [String], status: Int32, message: String) throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/p"])
            let local = f.root + "/tree"
            for d in 0..<10 {
                try FileManager.default.createDirectory(atPath: local + "/d\(d)", withIntermediateDirectories: true)
                for i in 0..<300 {
                    #expect(FileManager.default.createFile(atPath: local + "/d\(d)/f\(i)", contents: sampleBytes("\(d)-\(i)", size: 200)))
                }
            }
            let result = Box<RawResult?>(nil)
            let done = DispatchSemaphore(value: 0)
            let environment = f.environment
            Thread.detachNewThread {
                let put = try? runLocker(environment: environment, ["put", "-r", local, "/p/x"])
                result.update { $0 = put }
                done.signal()
            }
            // Until the import is building /p/x out of sight.
            var building = false
            let deadline = Date() + 60
            while !building && Date() < deadline {
                building = ((try? FileManager.default.contentsOfDirectory(atPath: f.store + "/ns")) ?? []).contains { $0.contains(".tmp-dir-") }
                if !building { usleep(200) }
            }
            #expect(building, "no new directory was staged")
            let interfered = try f.raw(interference)
            let remade = interference[0] == "rm" ? try f.raw(["mkdir", "/p"]) : interfered
            done.wait()
            guard let put = result.value else {
                Issue.record("put -r did not run")
                return
            }
            #expect(interfered.status == 0 && remade.status == 0, "the import ended first: \(interfered) \(remade) \(put)")
            #expect(put.status == status, "\(put)")
            #expect(put.stderr == "locker: error: the import stopped: \(message)\n"
                    + "locker: hint: run the command again to store the rest\n", "\(put)")
            #expect(f.headerFiles().isEmpty)
            #expect(f.dataFiles().isEmpty)
            #expect(localFiles(f.store).filter { $0.contains(".tmp-") }.isEmpty)
            #expect(try f.raw(["verify"]).status == 0)

            let again = try f.ok(["put", "-r", local, "/p/x"])
            #expect(again.stdout.contains("Stored 3000 objects under /p/x."), "\(again)")
            #expect(try f.stat("/p/x/d3/f17").size == UInt64(sampleBytes("3-17", size: 200).count))
        }
    }

    /// Into a path that does not exist yet (parents missing too): the new
    /// directories are built out of sight with the small files written at
    /// their final names, published at once, and the files that may need a
    /// data file are stored into them afterwards. Everything reads back,
    /// nothing temporary is left, and the store verifies.
    @Test func treeIntoNewPath() throws {
        try withStoreFixture { f in
            var (local, files) = try treeBeside(f, storeDirectory: "/new", version: 4)
            // Over the inline limit, within a batch.
            for i in 0..<3 {
                let data = pseudoRandomBytes(100_000 + i, seed: UInt64(40 + i))
                try FileManager.default.createDirectory(atPath: local + "/mid", withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: local + "/mid/m\(i)", contents: data))
                files["mid/m\(i)"] = data
            }
            let put = try f.ok(["put", "-r", local, "/new/a/b"])
            #expect(put.stdout.contains("Stored \(files.count) objects under /new/a/b."), "\(put)")
            #expect(f.dataFiles().count == 4, "big.bin and the three mid files have data files")
            #expect(try f.stat("/new/a/b/many/f7").protectionSource == "storeDefault")
            #expect(try f.stat("/new/a/b/empty-dir").type == "directory")
            #expect(localFiles(f.store).filter { $0.contains(".tmp-") }.isEmpty)
            #expect(try f.raw(["verify", "--read-data"]).status == 0)

            // Objects in new directories below a directory with a default
            // class inherit it.
            try f.ok(["put", "-r", local + "/secret", "/new/secret/s"])
            #expect(try f.stat("/new/secret/s/deeper/s3").protection == "complete")
            #expect(try f.stat("/new/secret/s/deeper/s3").protectionSource == "inherited:/new/secret")

            let out = f.root + "/out"
            try f.ok(["get", "-r", "/new/a/b", out])
            #expect(localFiles(out) == localFiles(local))
            for (path, data) in files {
                #expect(FileManager.default.contents(atPath: out + "/" + path) == data, "\(path)")
            }
        }
    }

    /// Below SRC, `put -r` stores directories and regular files only: a
    /// symbolic link (to a file outside the tree, to a directory outside
    /// it, or back into the tree) is not followed, and a FIFO is not read
    /// (it would block the import for ever). Each is one warning line and
    /// is counted; the import exits 0. SRC itself may be a link to a
    /// directory.
    @Test func treeSkipsLinksAndSpecialFiles() throws {
        try withStoreFixture { f in
            let (local, outside) = try treeBesideOutside(f, "linked", subdirectory: "sub")
            #expect(FileManager.default.createFile(atPath: local + "/sub/kept", contents: Data("kept".utf8)))
            #expect(FileManager.default.createFile(atPath: outside + "/secret", contents: Data("outside".utf8)))
            try #require(symlink(outside + "/secret", local + "/file-link") == 0)
            try #require(symlink(outside, local + "/dir-link") == 0)
            try #require(symlink(".", local + "/sub/loop") == 0)
            try #require(mkfifo(local + "/sub/fifo", 0o600) == 0)
            try #require(symlink(local, f.root + "/src-link") == 0)

            let put = try f.run(["put", "-r", f.root + "/src-link", "/linked"], timeout: 20)
            #expect(put.status == 0, "\(put)")
            #expect(put.stdout.contains("Stored 1 object under /linked (4 skipped; see the warnings)."), "\(put)")
            let link = "a symbolic link (not followed), not stored"
            for (name, what) in [("dir-link", link), ("file-link", link), ("sub/fifo", "a FIFO, not stored"), ("sub/loop", link)] {
                #expect(put.stderr.contains("locker: warning: skipped \(f.root)/src-link/\(name): \(what)\n"), "\(name): \(put)")
            }
            #expect(try f.ok(["get", "/linked/sub/kept"]).stdout == "kept")
            for path in ["/linked/file-link", "/linked/dir-link", "/linked/dir-link/secret", "/linked/sub/loop", "/linked/sub/fifo"] {
                #expect(try f.raw(["stat", path]).status == 66, "\(path)")
            }

            let json = try f.ok(["put", "-r", local, "/again", "--json"], timeout: 20)
            let report = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Int]
            #expect(report == ["imported": 1, "skipped": 4, "unreadable": 0, "changed": 0], "\(json)")
        }
    }

    /// A name that is not UTF-8 cannot be a store name: `put -r` skips
    /// such a file or directory with a warning that shows its bytes, and
    /// counts it (it used to drop the file without a word); an argument
    /// that is not UTF-8 is a usage error naming the byte, not a lookup
    /// of another name.
    @Test func namesThatAreNotUTF8AreSkippedAloud() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/odd"
            // Made by the shell: a Swift string cannot hold these names.
            let made = try f.runProgram("/bin/sh", ["-c", """
                mkdir -p "$1/ok" "$1/d$(printf '\\377')ir" && printf one > "$1/caf$(printf '\\351').txt" \
                  && printf inner > "$1/d$(printf '\\377')ir/inner" && printf kept > "$1/ok/kept" \
                  && printf back > "$1/back\\\\slash"
                """, "sh", local])
            try #require(made.status == 0, "\(made)")
            let put = try f.run(["put", "-r", local, "/odd"], timeout: 20)
            #expect(put.status == 0, "\(put)")
            #expect(put.stdout == "Stored 2 objects under /odd (2 skipped; see the warnings).\n", "\(put)")
            let why = "its name is not UTF-8, which store names must be; not stored (rename it to store it)"
            #expect(put.stderr.contains("locker: warning: skipped \(local)/caf\\xe9.txt: \(why)\n"), "\(put)")
            #expect(put.stderr.contains("locker: warning: skipped \(local)/d\\xffir: \(why)\n"), "\(put)")
            #expect(put.stderr.components(separatedBy: "\n").count == 3, "\(put)")
            #expect(try f.ok(["get", "/odd/ok/kept"]).stdout == "kept")
            #expect(try f.ok(["get", "/odd/back\\slash"]).stdout == "back")
            #expect(try f.ok(["ls", "/odd"]).stdout == "back\\\\slash\nok/\n")
            let json = try f.ok(["put", "-r", local, "/again", "--json"], timeout: 20)
            let report = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Int]
            #expect(report == ["imported": 2, "skipped": 2, "unreadable": 0, "changed": 0], "\(json)")

            let single = try f.runProgram("/bin/sh", ["-c", "\"$0\" put \"$1/caf$(printf '\\351').txt\" /x", CLIFixture.lockerPath, local])
            #expect(single.status == 64, "\(single)")
            #expect(single.stderr.hasPrefix("locker: error: argument 2, '\(local)/caf\u{FFFD}.txt', is not UTF-8 (byte \(local.utf8.count + 5) is 0xe9)\n"),
                    "\(single)")
            #expect(try f.raw(["stat", "/x"]).status == 66)
        }
    }

    /// Root whose capabilities to read past a file's mode were dropped
    /// (as a container may run it) cannot read another user's file of mode
    /// 0600, though it is root and its mode says nothing of root: the walk
    /// asks the kernel, and the file is skipped aloud as for any user.
    @Test(.enabled(if: geteuid() == 0 && setprivPath != nil, "needs root and setpriv (util-linux)"))
    func rootWithoutReadCapabilitiesSkipsWhatItCannotRead() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/src"
            try FileManager.default.createDirectory(atPath: local + "/sub", withIntermediateDirectories: true)
            try Data("kept".utf8).write(to: URL(fileURLWithPath: local + "/a.txt"))
            try Data("another user's".utf8).write(to: URL(fileURLWithPath: local + "/sub/theirs.txt"))
            #expect(chown(local + "/sub/theirs.txt", 65534, 65534) == 0)
            #expect(chmod(local + "/sub/theirs.txt", 0o600) == 0)
            let put = try f.runProgram(setprivPath!, ["--bounding-set", "-dac_override,-dac_read_search", "--",
                                                      CLIFixture.lockerPath, "put", "-r", local, "/t"])
            #expect(put.status == 1, "\(put)")
            #expect(put.stdout == "Stored 1 object under /t (1 unreadable; see the warnings).\n", "\(put)")
            #expect(put.stderr.hasPrefix("locker: warning: not stored: \(local)/sub/theirs.txt: Permission denied\n"
                                         + "locker: error: 1 file or directory could not be read and was not stored\n"), "\(put)")
            #expect(try f.raw(["get", "/t/a.txt"]).stdout == Data("kept".utf8))
            #expect(try f.raw(["stat", "/t/sub/theirs.txt"]).status == 66)
            // With its capabilities, root reads it.
            try f.ok(["put", "-r", local, "/u"])
            #expect(try f.raw(["get", "/u/sub/theirs.txt"]).stdout == Data("another user's".utf8))
        }
    }

    /// A file or directory below SRC that its user may not read does not
    /// stop `put -r`, as it stops neither `cp -r` nor tar: each is named by
    /// one warning line and nothing of it is stored, every file that can
    /// be read is, and the command then exits 1 with a summary line
    /// (`--json`: one document, counting them as "unreadable"). Once they
    /// may be read, the next `put -r` stores them. A small unreadable file
    /// (it would go in a batch), a large one (stored alone, after the
    /// directories the import creates appear), and a directory that cannot
    /// be listed, with a file in it. Run as uid 65534: root reads anything.
    @Test(.enabled(if: OtherUser.isPossible, OtherUser.needs))
    func treeSkipsWhatItsUserCannotRead() throws {
        try withOtherUser { _, other in
            let readable = [
                "a.txt": Data("top".utf8),
                "sub/b.txt": Data("below".utf8),
                "sub/big.bin": pseudoRandomBytes(5 << 20, seed: 21),
            ]
            let unreadable = [
                "hidden.txt": Data("not for this user".utf8),
                "sub/hidden.bin": pseudoRandomBytes(5 << 20, seed: 22),
                "closed/inside.txt": Data("in a directory this user may not list".utf8),
            ]
            let every = readable.merging(unreadable) { a, _ in a }
            let local = other.home + "/src"
            try other.files(every.reduce(into: [:]) { $0["src/" + $1.key] = $1.value })
            for path in ["hidden.txt", "sub/hidden.bin", "closed"] { #expect(chmod(local + "/" + path, 0) == 0) }

            let put = try other.locker(["put", "-r", local, "/t"])
            #expect(put.status == 1, "\(put)")
            #expect(put.stdout == "Stored 3 objects under /t (3 unreadable; see the warnings).\n", "\(put)")
            // In walk order (the large file in a new directory is stored,
            // or not, after the directories appear).
            #expect(put.stderr == """
                locker: warning: not stored: \(local)/closed: Permission denied
                locker: warning: not stored: \(local)/hidden.txt: Permission denied
                locker: warning: not stored: \(local)/sub/hidden.bin: Permission denied
                locker: error: 3 files or directories could not be read and were not stored
                locker: hint: the warnings name them; once this user may read them, run the command again to store them

                """, "\(put)")
            func fetchedBack(_ files: [String: Data]) throws {
                for (path, data) in files {
                    let out = other.home + "/fetched"
                    let get = try other.locker(["get", "/t/" + path, out])
                    #expect(get.status == 0, "\(get)")
                    #expect(FileManager.default.contents(atPath: out) == data, "\(path)")
                    try FileManager.default.removeItem(atPath: out)
                }
            }
            try fetchedBack(readable)
            #expect(try other.locker(["ls", "/t"]).stdout == "a.txt\nsub/\n")
            #expect(try other.locker(["ls", "/t/sub"]).stdout == "b.txt\nbig.bin\n")

            // Again, into the tree stored, as SRC/ (the same tree): the
            // same lines, with one slash, and the JSON.
            let json = try other.locker(["put", "-r", local + "//", "/t", "--json"])
            #expect(json.status == 1 && json.stderr == put.stderr, "\(json)")
            let report = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Int]
            #expect(report == ["imported": 3, "skipped": 0, "unreadable": 3, "changed": 0], "\(json)")

            // SRC itself is no entry to skip: the import fails as before.
            let closed = try other.locker(["put", "-r", local + "/closed", "/closed"])
            #expect(closed.status == 1 && closed.stdout.isEmpty, "\(closed)")
            #expect(closed.stderr == "locker: error: cannot read \(local)/closed: Permission denied\n", "\(closed)")

            for (path, mode) in [("hidden.txt", 0o644), ("sub/hidden.bin", 0o644), ("closed", 0o755)] {
                #expect(chmod(local + "/" + path, mode_t(mode)) == 0)
            }
            let again = try other.locker(["put", "-r", local, "/t"])
            #expect(again.status == 0 && again.stderr.isEmpty, "\(again)")
            #expect(again.stdout == "Stored 6 objects under /t.\n", "\(again)")
            try fetchedBack(every)
            #expect(try other.locker(["ls", "/t"]).stdout == "a.txt\nclosed/\nhidden.txt\nsub/\n")
        }
    }

    /// A file written to while `put` or `put -r` reads it is stored as
    /// read, with a warning line, and counted in `put -r`'s summary and
    /// JSON; files left alone are not reported. One writer rewrites a
    /// byte of a 32 MiB file in place (stored alone, outside batches) and
    /// appends a byte to a 3 MiB file (stored in a batch) every tenth of
    /// a millisecond, for as long as the commands run, so each file's size
    /// or times move during any read of it.
    @Test func putWarnsWhenAFileChangesWhileRead() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/changing"
            try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
            let moving = local + "/moving.bin"
            let growing = local + "/growing.log"
            let contents = pseudoRandomBytes(32 << 20, seed: 7)
            // As large as the other: a read of a few milliseconds could
            // fall between two appends when the tests load both cores.
            let start = pseudoRandomBytes(32 << 20, seed: 8)
            #expect(FileManager.default.createFile(atPath: moving, contents: contents))
            #expect(FileManager.default.createFile(atPath: growing, contents: start))
            #expect(FileManager.default.createFile(atPath: local + "/still", contents: Data("still".utf8)))
            func warning(_ path: String) -> String {
                "locker: warning: \(path) changed while it was read: stored as read, which may mix its old and new contents\n"
            }
            func report(_ result: CLIResult) throws -> [String: Int]? {
                try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Int]
            }

            // The control first: nothing writes, nothing is reported.
            let quiet = try f.ok(["put", moving, "/quiet.bin"])
            #expect(!quiet.stderr.contains("changed while"), "\(quiet)")
            let quietTree = try f.ok(["put", "-r", local, "/quiet-tree", "--json"])
            #expect(try report(quietTree) == ["imported": 3, "skipped": 0, "unreadable": 0, "changed": 0], "\(quietTree)")
            #expect(!quietTree.stderr.contains("changed while"), "\(quietTree)")

            let rewrite = open(moving, O_WRONLY)
            let append = open(growing, O_WRONLY | O_APPEND)
            try #require(rewrite >= 0 && append >= 0)
            defer { close(rewrite); close(append) }
            let stop = Box(false)
            let writes = Box(0)
            let writer = Thread {
                var same: UInt8 = contents[0]
                var more: UInt8 = 0x2E
                while !stop.value {
                    _ = pwrite(rewrite, &same, 1, 0)
                    _ = write(append, &more, 1)
                    writes.update { $0 += 1 }
                    usleep(100)
                }
            }
            writer.start()
            defer { stop.update { $0 = true } }
            while writes.value < 10 { usleep(1000) }

            for path in [moving, growing] {
                let single = try f.run(["put", path, "/single/"])
                #expect(single.status == 0, "\(single)")
                #expect(single.stderr.contains(warning(path)), "\(single)")
            }

            let tree = try f.run(["put", "-r", local, "/tree"])
            #expect(tree.status == 0, "\(tree)")
            #expect(tree.stdout.contains("Stored 3 objects under /tree (2 changed while read; see the warnings)."), "\(tree)")
            #expect(tree.stderr.contains(warning(moving)) && tree.stderr.contains(warning(growing)), "\(tree)")
            #expect(!tree.stderr.contains("still"), "\(tree)")

            let json = try f.ok(["put", "-r", local, "/tree-json", "--json"])
            #expect(try report(json) == ["imported": 3, "skipped": 0, "unreadable": 0, "changed": 2], "\(json)")
            stop.update { $0 = true }

            // What was stored is what was read: the rewritten byte is the
            // one that was there, and the growing file only grew.
            #expect(try f.raw(["get", "/tree/moving.bin"]).stdout == contents)
            let grown = try f.raw(["get", "/tree/growing.log"]).stdout
            #expect(grown.count > start.count && grown.prefix(start.count) == start && grown.dropFirst(start.count).allSatisfy { $0 == 0x2E })
            #expect(try f.ok(["get", "/tree/still"]).stdout == "still")
        }
    }

    /// `put -r` opens every file relative to SRC, through no symbolic
    /// link: a directory of the tree replaced by a link to a directory
    /// outside, after the walk saw it and before its files are read, fails
    /// the import with one line, and nothing from outside is stored.
    ///
    /// The files of more than 56 KiB in a directory the import creates are
    /// stored after the walk, in walk order: here a 256 MiB file, then
    /// `b-dir/secret.bin`. Once the command has the large file open (seen
    /// in /proc), `b-dir` is swapped for a link; the small file is read
    /// after the large one is stored.
    @Test func treeReadsNoFileThroughADirectoryReplacedByALink() throws {
        try withStoreFixture { f in
            let (local, outside) = try treeBesideOutside(f, "tree", subdirectory: "b-dir")
            let big = local + "/a-big.bin"
            try #require(FileManager.default.createFile(atPath: big, contents: nil))
            try #require(truncate(big, 256 << 20) == 0)
            let inside = pseudoRandomBytes(100 << 10, seed: 1)
            let secret = pseudoRandomBytes(100 << 10, seed: 2)
            #expect(FileManager.default.createFile(atPath: local + "/b-dir/secret.bin", contents: inside))
            #expect(FileManager.default.createFile(atPath: outside + "/secret.bin", contents: secret))

            let errors = f.root + "/put.err"
            let run = try BackgroundRun(f, ["put", "-r", local, "/t"], stderr: errors)
            defer { run.stop() }
            let pid = run.process.processIdentifier
            func hasOpen(_ path: String) -> Bool {
                let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
                return fds.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == path }
            }
            let deadline = Date().addingTimeInterval(30)
            while !hasOpen(big), Date() < deadline, run.waitForExit(seconds: 0) == nil { usleep(200) }
            try #require(hasOpen(big), "the command never had \(big) open")
            try FileManager.default.moveItem(atPath: local + "/b-dir", toPath: f.root + "/b-dir-moved")
            try #require(symlink(outside, local + "/b-dir") == 0)

            let status = run.waitForExit(seconds: 60)
            let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            #expect(status == 1, "exit \(String(describing: status)): \(stderr)")
            // The file is looked at again before it is stored: the look
            // finds its directory replaced.
            #expect(stderr.contains("locker: error: cannot read \(local)/b-dir: it, or a directory on its way, is now a symbolic link (not followed)"), "\(stderr)")
            let stored = try f.raw(["get", "/t/b-dir/secret.bin"])
            #expect(stored.stdout != secret, "a file from outside the tree was stored")
            #expect(stored.status == 66, "\(stored)")
        }
    }

    /// Runs `locker arguments` in the background until it has a file open
    /// whose path `isWatched` accepts, then calls `swap`; returns the exit
    /// status and standard error.
    private func fetch(_ f: CLIFixture, _ arguments: [String], swapWhen isWatched: (String) -> Bool,
                       _ swap: () throws -> Void) throws -> (status: Int32?, stderr: String) {
        let errors = f.root + "/fetch.err"
        let run = try BackgroundRun(f, arguments, stderr: errors)
        defer { run.stop() }
        let pid = run.process.processIdentifier
        func hasOpen() -> Bool {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return fds.contains {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")).map(isWatched) == true
            }
        }
        let deadline = Date().addingTimeInterval(30)
        while !hasOpen(), Date() < deadline, run.waitForExit(seconds: 0) == nil { usleep(100) }
        try #require(hasOpen(), "the command never had the file open")
        try swap()
        let status = run.waitForExit(seconds: 60)
        return (status, (try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")
    }

    /// Whatever is created in the directories watched, even if removed
    /// again before it is asked (inotify queues each creation).
    private final class CreationWatch {
        private let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))

        init(_ directories: [String]) throws {
            try #require(fd >= 0)
            for directory in directories { try add(directory) }
        }

        deinit { close(fd) }

        func add(_ directory: String) throws {
            try #require(inotify_add_watch(fd, directory, UInt32(IN_CREATE)) >= 0)
        }

        /// The bytes of the creation events since the last call.
        func created() -> Int {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            let n = read(fd, &buffer, buffer.count)
            return max(n, 0)
        }
    }

    /// Large sparse files at `paths` below `local`: fetched at disk speed,
    /// so a swap can happen while one is written.
    private func largeFiles(_ local: String, _ paths: [String], size: Int = 64 << 20) throws {
        for path in paths {
            let full = local + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try #require(FileManager.default.createFile(atPath: full, contents: nil))
            try #require(truncate(full, off_t(size)) == 0)
        }
    }

    /// `get -r` writes into the directories it opened, by descriptor: a
    /// directory below DEST moved away and replaced by a link to another
    /// directory while its files are written gets no file where the link
    /// leads. Into an existing DEST, the files land in the directory
    /// opened, wherever it was moved. Into a new DEST, the temporary
    /// directory it is built in is swapped: the fetch fails, empties the
    /// tree it built, and leaves DEST absent.
    @Test func treeFetchWritesNoFileThroughADirectoryReplacedByALink() throws {
        try withStoreFixture { f in
            let (local, outside) = try treeBesideOutside(f, "tree", subdirectory: "b")
            // Four large files: the cores write one each at a time, so on a
            // machine of fewer than four the last are created after the
            // swap below (on more, the renames still go through the link).
            let size = 64 << 20
            try largeFiles(local, (0..<4).map { "b/big\($0).bin" }, size: size)
            try f.ok(["put", "-r", local, "/t"])
            let watch = try CreationWatch([outside])

            // An existing DEST with b in it: b is swapped.
            let dest = f.root + "/dest"
            let moved = f.root + "/b-moved"
            try FileManager.default.createDirectory(atPath: dest + "/b", withIntermediateDirectories: true)
            let (status, stderr) = try fetch(f, ["get", "-r", "/t", dest], swapWhen: { $0.hasPrefix(dest + "/b/.locker-") }) {
                try FileManager.default.moveItem(atPath: dest + "/b", toPath: moved)
                try #require(symlink(outside, dest + "/b") == 0)
            }
            #expect(watch.created() == 0, "files were created where the link leads")
            #expect(localFiles(outside).isEmpty, "written where the link leads: \(localFiles(outside))")
            #expect(status == 0, "exit \(String(describing: status)): \(stderr)")
            #expect(localFiles(moved) == (0..<4).map { "big\($0).bin" }, "\(localFiles(moved))")
            for i in 0..<4 {
                var st = stat()
                #expect(lstat(moved + "/big\(i).bin", &st) == 0 && st.st_size == size && st.st_mode & 0o777 == 0o600)
            }

            // A new DEST: the directory it is built in is swapped while b's
            // files are written. The link leads to a directory with a b of
            // its own, where b's files would go.
            try FileManager.default.createDirectory(atPath: outside + "/b", withIntermediateDirectories: true)
            try watch.add(outside + "/b")
            #expect(watch.created() > 0, "the watch missed the creation of \(outside)/b")
            let parent = f.root + "/parent"
            let builtIn = f.root + "/built-in-moved"
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            let isBigFile = { (path: String) in path.hasPrefix(parent + "/.locker-") && path.hasSuffix(".bin") }
            let (newStatus, newStderr) = try fetch(f, ["get", "-r", "/t", parent + "/new"], swapWhen: isBigFile) {
                let staging = try #require(try FileManager.default.contentsOfDirectory(atPath: parent).first { $0.hasPrefix(".locker-") })
                try FileManager.default.moveItem(atPath: parent + "/" + staging, toPath: builtIn)
                try #require(symlink(outside, parent + "/" + staging) == 0)
            }
            #expect(watch.created() == 0, "files were created where the link leads")
            #expect(localFiles(outside) == ["b"], "written where the link leads: \(localFiles(outside))")
            #expect(newStatus == 1, "exit \(String(describing: newStatus)): \(newStderr)")
            #expect(newStderr.contains("locker: error: cannot write \(parent)/new: the directory it was built in was moved or replaced while it was being built"), "\(newStderr)")
            var st = stat()
            #expect(lstat(parent + "/new", &st) != 0 && errno == ENOENT, "DEST was left behind")
            #expect(localFiles(builtIn).isEmpty, "the tree built was left: \(localFiles(builtIn))")
        }
    }

    /// A directory of an existing DEST whose turn comes after the fetch
    /// looked at it must still be what it saw: c/y replaced by another
    /// directory, or c (reopened by its place once x's subtree is done)
    /// replaced by a link, fails the fetch with one line; nothing is
    /// created where the link leads, and no temporary is left anywhere.
    @Test func treeFetchRefusesADirectoryReplacedWhileItWaits() throws {
        try withStoreFixture { f in
            let (local, outside) = try treeBesideOutside(f, "tree", subdirectory: "c/y")
            try largeFiles(local, ["c/x/deep/big.bin"])
            #expect(FileManager.default.createFile(atPath: local + "/c/y/small.txt", contents: Data("small".utf8)))
            try f.ok(["put", "-r", local, "/u"])
            let watch = try CreationWatch([outside])

            func existingDestination(_ name: String) throws -> String {
                let dest = f.root + "/" + name
                for path in ["c/x/deep", "c/y"] {
                    try FileManager.default.createDirectory(atPath: dest + "/" + path, withIntermediateDirectories: true)
                }
                return dest
            }
            func noTemporaries(_ root: String) {
                #expect(localFiles(root).allSatisfy { !$0.contains(".locker-") }, "\(localFiles(root))")
            }

            // c/y replaced by another directory.
            let dest = try existingDestination("dest")
            let (status, stderr) = try fetch(f, ["get", "-r", "/u", dest], swapWhen: { $0.hasPrefix(dest + "/c/x/deep/.locker-") }) {
                try FileManager.default.moveItem(atPath: dest + "/c/y", toPath: f.root + "/y-moved")
                try FileManager.default.createDirectory(atPath: dest + "/c/y", withIntermediateDirectories: false)
            }
            #expect(status == 1, "exit \(String(describing: status)): \(stderr)")
            #expect(stderr.contains("locker: error: cannot write into \(dest)/c/y: it was moved or replaced while files were written into it"), "\(stderr)")
            #expect(localFiles(dest + "/c/y").isEmpty && localFiles(f.root + "/y-moved").isEmpty)
            noTemporaries(dest)

            // c replaced by a link to a directory with a y of its own.
            try FileManager.default.createDirectory(atPath: outside + "/y", withIntermediateDirectories: true)
            try watch.add(outside + "/y")
            _ = watch.created()
            let linked = try existingDestination("linked")
            let moved = f.root + "/c-moved"
            let (linkStatus, linkStderr) = try fetch(f, ["get", "-r", "/u", linked], swapWhen: { $0.hasPrefix(linked + "/c/x/deep/.locker-") }) {
                try FileManager.default.moveItem(atPath: linked + "/c", toPath: moved)
                try #require(symlink(outside, linked + "/c") == 0)
            }
            #expect(watch.created() == 0, "files were created where the link leads")
            #expect(localFiles(outside) == ["y"], "\(localFiles(outside))")
            #expect(linkStatus == 1, "exit \(String(describing: linkStatus)): \(linkStderr)")
            #expect(linkStderr.contains("locker: error: cannot write into \(linked)/c: it, or a directory on its way, is now a symbolic link (not followed below the destination)"), "\(linkStderr)")
            noTemporaries(moved)
        }
    }

    /// `export` writes by descriptor too, as `get -r` does: while
    /// x/deep's file is written, c is replaced by a link to another
    /// directory. The file is still written in the directory it was
    /// created in; reopening c for y then fails the export with one line,
    /// and nothing is created where the link leads.
    @Test func exportWritesNoFileThroughADirectoryReplacedByALink() throws {
        try withStoreFixture { f in
            let (local, outside) = try treeBesideOutside(f, "tree", subdirectory: "c")
            try largeFiles(local, ["c/x/deep/big.bin", "c/y/big.bin"])
            try f.ok(["put", "-r", local, "/u"])
            let watch = try CreationWatch([outside])
            // An existing DEST (a new one is built out of sight), with the
            // tree's directories: files go to temporary names beside their
            // targets, and a directory replaced meanwhile is found out.
            let exported = f.root + "/exported"
            for path in ["u/c/x/deep", "u/c/y"] {
                try FileManager.default.createDirectory(atPath: exported + "/" + path, withIntermediateDirectories: true)
            }
            let (status, stderr) = try fetch(f, ["export", exported], swapWhen: { $0.hasPrefix(exported + "/u/c/x/deep/.locker-") }) {
                try FileManager.default.moveItem(atPath: exported + "/u/c", toPath: f.root + "/c-moved")
                try #require(symlink(outside, exported + "/u/c") == 0)
            }
            #expect(watch.created() == 0, "files were created where the link leads")
            #expect(localFiles(outside).isEmpty, "\(localFiles(outside))")
            #expect(status == 1, "exit \(String(describing: status)): \(stderr)")
            #expect(stderr == "locker: error: cannot write into \(exported)/u/c: it, or a directory on its way, is now a symbolic link (not followed below the destination)\n", "\(stderr)")
            // The file was written in the directory it was created in, now
            // moved, and removed from there with the failure; no manifest.
            #expect(localFiles(f.root + "/c-moved") == ["x", "x/deep", "y"], "\(localFiles(f.root + "/c-moved"))")
            #expect(!FileManager.default.fileExists(atPath: exported + "/manifest.json"))
        }
    }

    /// A DEST that holds the device directory and the store (as a home
    /// directory holds both by default) takes what goes elsewhere, but an
    /// object whose path leads into either is refused before a byte is
    /// written there: a fetch once overwrote the keybag with an object
    /// named /d/keybag, and the device could never be unlocked again.
    @Test func treeFetchNeverWritesIntoTheDeviceOrTheStore() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/d/keybag", Data("not a keybag".utf8))
            try f.put("/x/s/planted", Data("plaintext".utf8))
            try f.put("/other/kept", Data("kept".utf8))
            let keybag = try fileBytes(f.device + "/keybag")
            let storeFiles = Set(try FileManager.default.subpathsOfDirectory(atPath: f.store))
            func expectRefused(_ r: RawResult, _ directory: String, _ what: String, _ summary: String) {
                #expect(r.status == 64, "\(summary): \(r)")
                #expect(r.stderr == "locker: error: cannot write into \(directory): it is \(what) \(directory), and fetched plaintext must not be written there\n"
                        + "locker: hint: fetch into a directory that does not hold the store or the device directory\n", "\(summary): \(r)")
                #expect((try? fileBytes(f.device + "/keybag")) == keybag, "\(summary): the keybag was written over")
                #expect(Set((try? FileManager.default.subpathsOfDirectory(atPath: f.store)) ?? []) == storeFiles,
                        "\(summary): a file was written into the store")
            }
            expectRefused(try f.raw(["get", "-r", "/", f.root]), f.device, "the device directory", "get -r / ROOT")
            expectRefused(try f.raw(["get", "-r", "/x", f.root]), f.store, "the store", "get -r /x ROOT")
            expectRefused(try f.raw(["export", f.root]), f.device, "the device directory", "export ROOT")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/manifest.json"))

            // What leads elsewhere is fetched as before.
            let other = try f.raw(["get", "-r", "/other", f.root + "/other"])
            #expect(other.status == 0, "\(other)")
            #expect(try fileBytes(f.root + "/other/kept") == Data("kept".utf8))
            try f.ok(["reboot"])
            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(try f.raw(["get", "/other/kept", "-"]).stdout == Data("kept".utf8))
        }
    }

    /// A failed fetch removes the temporary directory it built new
    /// directories in only if that is still what the name holds: another
    /// directory renamed there meanwhile (a user's own, moved by another
    /// uid who can write to DEST) is left alone, contents and all.
    @Test func failedTreeFetchRemovesOnlyWhatItMade() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/tree"
            try largeFiles(local, ["new/big.bin"])
            try f.ok(["put", "-r", local, "/v"])
            // Fetched in the same group as big.bin, and found damaged when
            // read: left out with a warning, and the fetch goes on to fail
            // at the swap below.
            let damaged = try f.putInline("/v/new/last", sampleBytes("last", size: 300))
            try flipBit(damaged, at: fileSize(damaged) - 5)

            let dest = f.root + "/dest"
            try FileManager.default.createDirectory(atPath: dest + "/keep", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: dest + "/keep/precious.txt", contents: Data("mine".utf8)))
            var container = ""
            let isBigFile = { (path: String) in path.hasPrefix(dest + "/.locker-") && path.hasSuffix("/big.bin") }
            let (status, stderr) = try fetch(f, ["get", "-r", "/v", dest], swapWhen: isBigFile) {
                container = try #require(try FileManager.default.contentsOfDirectory(atPath: dest).first { $0.hasPrefix(".locker-") })
                try FileManager.default.moveItem(atPath: dest + "/" + container, toPath: f.root + "/container-moved")
                try FileManager.default.moveItem(atPath: dest + "/keep", toPath: dest + "/" + container)
            }
            #expect(status == 1, "exit \(String(describing: status)): \(stderr)")
            #expect(stderr.contains("locker: warning: not fetched: integrity failure: /v/new/last"), "\(stderr)")
            #expect(FileManager.default.contents(atPath: dest + "/" + container + "/precious.txt") == Data("mine".utf8),
                    "the directory renamed in was emptied: \(localFiles(dest))")
            #expect(!FileManager.default.fileExists(atPath: dest + "/new"))
        }
    }

    /// A directory's last group of files waits to be written with the next
    /// directory's first (threads in two directories). When objects of both
    /// groups fail, the error names the waiting group's (the first in the
    /// order of the tree), and everything both groups wrote goes with the
    /// directories built out of sight.
    @Test func fetchFailureInAGroupWrittenWithTheNextDirectorysFiles() throws {
        try withStoreFixture { f in
            try f.initialize()
            let name = String(repeating: "n", count: 300)
            let other = String(repeating: "m", count: 300)
            try f.put("/a/" + name, sampleBytes("long"))
            try f.put("/a/ok", sampleBytes("ok"))
            for i in 0..<40 { try f.put("/b/f\(i)", sampleBytes("b\(i)", size: 100 + i)) }
            try f.put("/b/" + other, sampleBytes("other"))
            try expectFetchOfTheStoreFailsCleanly(f, naming: "a/" + name)
            let new = f.root + "/new"
            // Without the failing objects, both directories arrive whole.
            try f.ok(["rm", "/a/" + name])
            try f.ok(["rm", "/b/" + other])
            let fetched = try f.ok(["get", "-r", "/", new])
            #expect(fetched.stdout.contains("Fetched 41 objects"), "\(fetched)")
            #expect(FileManager.default.contents(atPath: new + "/a/ok") == sampleBytes("ok"))
            for i in 0..<40 { #expect(FileManager.default.contents(atPath: new + "/b/f\(i)") == sampleBytes("b\(i)", size: 100 + i)) }
        }
    }

    /// A new store holding /a/one and /a/two, then /b/NAME, where NAME is
    /// 300 bytes: a store name may be longer than a local one (255 bytes),
    /// so a fetch of /b fails (File name too long); /a's files come first
    /// in name order (`get -r` may write /a's small file in the same round
    /// as /b's). Returns NAME and /a's files.
    private func storeWithANameTooLongLocally(_ f: CLIFixture) throws -> (name: String, files: [String: Data]) {
        try f.initialize()
        let files = ["a/one": sampleBytes("one", size: 1000), "a/two": sampleBytes("two", size: 70_000)]
        for (path, data) in files { try f.put("/" + path, data) }
        let name = String(repeating: "n", count: 300)
        try f.put("/b/" + name, sampleBytes("long"))
        return (name, files)
    }

    /// `export` into a new DEST builds it out of sight, as `get -r` does.
    /// A failure that stops the export partway (a name too long locally,
    /// after /a's files were written: into an existing DEST with an `a`,
    /// they stay, with no manifest) leaves no DEST and no temporary
    /// directory beside it. An object left out is not such a failure: with a locked one
    /// (exit 75), DEST appears with every other file and the manifest, as
    /// it does when everything is exported.
    @Test func exportIntoANewDirectoryAppearsWholeOrNotAtAll() throws {
        try withStoreFixture { f in
            let (name, files) = try storeWithANameTooLongLocally(f)
            func expectFiles(_ dest: String) {
                for (path, data) in files {
                    #expect(FileManager.default.contents(atPath: dest + "/" + path) == data, "\(dest)/\(path)")
                }
            }
            let existing = f.root + "/existing"
            try FileManager.default.createDirectory(atPath: existing, withIntermediateDirectories: false)
            let partial = try f.raw(["export", existing])
            #expect(partial.status == 1, "\(partial)")
            #expect(partial.stderr == "locker: error: cannot write \(existing)/b/\(name): File name too long\n", "\(partial)")
            // As for get -r: directories missing locally are built out of
            // sight, and appear once the export has written everything.
            #expect(localFiles(existing).isEmpty, "\(localFiles(existing))")
            // Into directories there already, each file goes to a
            // temporary name and is renamed into place at the commit: /a's
            // are renamed, /b's name is refused (it is the one too long).
            for directory in ["a", "b"] {
                try FileManager.default.createDirectory(atPath: existing + "/" + directory, withIntermediateDirectories: false)
            }
            #expect(try f.raw(["export", existing]).stderr == partial.stderr)
            #expect(localFiles(existing) == ["a", "a/one", "a/two", "b"], "\(localFiles(existing))")
            expectFiles(existing)

            let parent = f.root + "/parent"
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: false)
            let dest = parent + "/dest"
            let failed = try f.raw(["export", dest])
            #expect(failed.status == 1, "\(failed)")
            #expect(failed.stderr == "locker: error: cannot write \(dest)/b/\(name): File name too long\n", "\(failed)")
            var st = stat()
            #expect(lstat(dest, &st) != 0 && errno == ENOENT, "DEST was left: \(localFiles(dest))")
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent).isEmpty, "left beside DEST: \(localFiles(parent))")

            try f.ok(["rm", "-r", "/b"])
            try f.put("/c/secret", sampleBytes("secret"), ["--class", "A"])
            try f.ok(["lock", "--now"])
            let skipped = try f.raw(["export", dest])
            #expect(skipped.status == 75, "\(skipped)")
            #expect(skipped.text.contains("Exported 2 of 3 objects to \(dest).\n  skipped /c/secret: locked: "), "\(skipped)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent) == ["dest"])
            #expect(localFiles(dest) == ["a", "a/one", "a/two", "c", "manifest.json"], "\(localFiles(dest))")
            expectFiles(dest)
            #expect(lstat(dest, &st) == 0 && st.st_mode & 0o777 == 0o700, "\(String(st.st_mode, radix: 8))")
            let manifest = String(decoding: try fileBytes(dest + "/manifest.json"), as: UTF8.self)
            #expect(manifest.contains("\"skipped\" : \"locked: complete is unavailable in this state\""), "\(manifest)")

            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            let whole = parent + "/whole"
            let exported = try f.raw(["export", whole])
            #expect(exported.status == 0 && exported.text == "Exported 3 of 3 objects to \(whole).\n", "\(exported)")
            #expect(localFiles(whole) == ["a", "a/one", "a/two", "c", "c/secret", "manifest.json"], "\(localFiles(whole))")
            expectFiles(whole)
            #expect(FileManager.default.contents(atPath: whole + "/c/secret") == sampleBytes("secret"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent).sorted() == ["dest", "whole"])
        }
    }

    /// An error about a file in a directory built out of sight names it
    /// where the user asked for it, never in the temporary directory it is
    /// built in (`.locker-….tmp`, gone once the fetch ends): `get -r` into
    /// a new DEST, and into an existing one whose subdirectories are built
    /// in a temporary directory inside it. Neither leaves anything.
    @Test func fetchErrorsNameThePathUnderDestination() throws {
        try withStoreFixture { f in
            let (name, _) = try storeWithANameTooLongLocally(f)
            try expectFetchOfTheStoreFailsCleanly(f, naming: "b/" + name)
        }
    }

    /// `get -r /` into a new DEST and into an existing empty one fails
    /// (exit 1) with a name too long locally, `path` under DEST, and
    /// leaves nothing: no DEST, nothing in the existing one, no temporary.
    private func expectFetchOfTheStoreFailsCleanly(_ f: CLIFixture, naming path: String) throws {
        let existing = f.root + "/existing"
        try FileManager.default.createDirectory(atPath: existing, withIntermediateDirectories: false)
        let new = f.root + "/new"
        for dest in [new, existing] {
            let fetched = try f.raw(["get", "-r", "/", dest])
            #expect(fetched.status == 1, "\(fetched)")
            #expect(fetched.stderr == "locker: error: cannot write \(dest)/\(path): File name too long\n", "\(fetched)")
        }
        #expect(!FileManager.default.fileExists(atPath: new))
        #expect(localFiles(existing).isEmpty, "\(localFiles(existing))")
        #expect(localFiles(f.root).allSatisfy { !$0.contains(".locker-") }, "\(localFiles(f.root))")
    }

    /// Whether this process may mount a tmpfs (root, outside a sandbox
    /// that refuses it).
    static let canMount: Bool = {
        guard geteuid() == 0 else { return false }
        let point = NSTemporaryDirectory() + "lkmnt-" + UUID().uuidString.prefix(8)
        guard mkdir(point, 0o700) == 0 else { return false }
        defer { rmdir(point) }
        guard mount("none", point, "tmpfs", 0, nil) == 0 else { return false }
        umount(point)
        return true
    }()

    /// A directory below DEST that is another file system (a mount point,
    /// as another user's FUSE mount would be) is not entered: `get -r`
    /// and `export` fail with one line and write nothing into it. DEST
    /// itself may be one.
    @Test(.enabled(if: canMount, "needs root and mount(2)")) func treeFetchEntersNoMountPointBelowDestination() throws {
        try withStoreFixture { f in
            let (local, _) = try treeBesideOutside(f, "tree", subdirectory: "c")
            #expect(FileManager.default.createFile(atPath: local + "/c/file", contents: Data("inside".utf8)))
            try f.ok(["put", "-r", local, "/u"])
            let dest = f.root + "/dest"
            let mounted = dest + "/u/c"
            try FileManager.default.createDirectory(atPath: mounted, withIntermediateDirectories: true)
            try #require(mount("none", mounted, "tmpfs", 0, nil) == 0)
            defer { umount(mounted) }
            let watch = try CreationWatch([mounted])

            let fetched = try f.run(["get", "-r", "/u", dest + "/u"])
            #expect(fetched.status == 1, "\(fetched)")
            #expect(fetched.stderr.contains("locker: error: cannot write into \(mounted): it is on another file system than its parent (a mount point or a subvolume, not entered below the destination)"), "\(fetched)")
            #expect(fetched.stderr.contains("locker: hint: fetch into it as the destination itself"), "\(fetched)")
            let exported = try f.run(["export", dest])
            #expect(exported.status == 1 && exported.stderr.contains("it is on another file system"), "\(exported)")
            #expect(watch.created() == 0 && localFiles(mounted).isEmpty, "\(localFiles(mounted))")
            // Into the mount point itself: fine.
            try f.ok(["get", "-r", "/u/c", mounted])
            #expect(FileManager.default.contents(atPath: mounted + "/file") == Data("inside".utf8))
        }
    }

    /// `get -r` into an existing directory follows no symbolic link below
    /// it: a subdirectory that is a link (here to a directory outside)
    /// fails the fetch with one line, and nothing is written where it
    /// leads. DEST itself may be a link to a directory.
    @Test func treeFetchFollowsNoLinkBelowDestination() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/src"
            try FileManager.default.createDirectory(atPath: local + "/sub", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: local + "/sub/file", contents: Data("inside".utf8)))
            #expect(FileManager.default.createFile(atPath: local + "/top", contents: Data("top".utf8)))
            try f.ok(["put", "-r", local, "/t"])

            let outside = f.root + "/outside"
            let dest = f.root + "/dest"
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dest, withIntermediateDirectories: true)
            try #require(symlink(outside, dest + "/sub") == 0)
            let fetch = try f.run(["get", "-r", "/t", dest])
            #expect(fetch.status != 0, "\(fetch)")
            #expect(fetch.stderr.contains("locker: error: cannot write into \(dest)/sub: it exists and is not a directory (a symbolic link, not followed below the destination)"), "\(fetch)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
            #expect(localFiles(dest).allSatisfy { !$0.contains(".locker-") }, "\(localFiles(dest))")

            // The same through `export`.
            let exported = f.root + "/exported"
            try FileManager.default.createDirectory(atPath: exported, withIntermediateDirectories: true)
            try #require(symlink(outside, exported + "/t") == 0)
            let export = try f.run(["export", exported])
            #expect(export.status != 0 && export.stderr.contains("not followed below the destination"), "\(export)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)

            // DEST itself a link to a directory: followed.
            let real = f.root + "/real"
            try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
            try #require(symlink(real, f.root + "/dest-link") == 0)
            try f.ok(["get", "-r", "/t", f.root + "/dest-link"])
            #expect(FileManager.default.contents(atPath: real + "/sub/file") == Data("inside".utf8))
            #expect(FileManager.default.contents(atPath: real + "/top") == Data("top".utf8))
            // Fetched plaintext is the user's alone.
            for file in [real + "/sub/file", real + "/top"] {
                var st = stat()
                #expect(lstat(file, &st) == 0 && st.st_mode & 0o777 == 0o600, "\(file): \(String(st.st_mode, radix: 8))")
            }
        }
    }

    /// A tree of more than 4,096 objects is stored in several batches
    /// (one committed while the next is staged). Fetched into an existing
    /// directory, the files of its existing subdirectories are committed
    /// in several groups, each on a thread of its own while the next files
    /// are written; a locked class A object fetched after the first commit
    /// began fails the fetch with 75: every file in DEST is whole, no
    /// temporary is left, whether its commit had started or not, and the
    /// directory being built for the locked object is not there at all.
    /// Fetched into a new directory, the same failure leaves nothing.
    @Test func largeTreeFetchCommitsInGroupsAndFailsCleanly() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/tree"
            try FileManager.default.createDirectory(atPath: local + "/many", withIntermediateDirectories: true)
            func content(_ i: Int) -> Data { sampleBytes("large-tree-\(i)", size: 1 + i % 200) }
            for i in 0..<4300 {
                #expect(FileManager.default.createFile(atPath: local + "/many/f\(i)", contents: content(i)))
            }
            let put = try f.ok(["put", "-r", local, "/t"], timeout: 120)
            #expect(put.stdout.contains("Stored 4300 objects under /t."), "\(put)")
            #expect(try f.raw(["verify"], timeout: 120).status == 0)
            let out = f.root + "/out"
            let whole = try f.ok(["get", "-r", "/t", out], timeout: 120)
            #expect(whole.stdout.contains("Fetched 4300 objects"), "\(whole)")
            #expect(localFiles(out + "/many").count == 4300)
            for i in stride(from: 0, to: 4300, by: 97) {
                #expect(FileManager.default.contents(atPath: out + "/many/f\(i)") == content(i))
            }
            try FileManager.default.removeItem(atPath: out)

            // Directories are fetched in name order, each one's files
            // before its subdirectories: /t/zz after /t/many.
            _ = try f.ok(["mkdir", "-p", "/t/zz/deeper"])
            _ = try f.putInline("/t/zz/deeper/first", sampleBytes("first", size: 200))
            // A damaged object would be left out and the rest fetched; a
            // locked one stops the fetch.
            _ = try f.putInline("/t/zz/last", sampleBytes("zlast", size: 300), ["--class", "A"])
            try f.ok(["lock", "--now"])
            let rootBefore = localFiles(f.root)
            let failedNew = try f.raw(["get", "-r", "/t", out], timeout: 120)
            #expect(failedNew.status == 75 && failedNew.stderr.contains("protected data unavailable"), "\(failedNew)")
            #expect(!FileManager.default.fileExists(atPath: out))
            #expect(localFiles(f.root) == rootBefore, "the temporary tree was left")

            // /t/many exists: its files go through temporaries and group
            // commits; /t/zz does not: it is built out of sight.
            try FileManager.default.createDirectory(atPath: out + "/many", withIntermediateDirectories: true)
            let failed = try f.raw(["get", "-r", "/t", out], timeout: 120)
            #expect(failed.status == 75 && failed.stderr.contains("protected data unavailable"), "\(failed)")
            let present = localFiles(out)
            #expect(present.filter { $0.contains(".locker-") }.isEmpty, "temporaries left")
            #expect(!present.contains("zz") && !present.contains { $0.hasPrefix("zz/") }, "\(present.filter { $0.hasPrefix("zz") })")
            let fetched = localFiles(out + "/many")
            #expect(!fetched.isEmpty, "no group was committed before the failure")
            for name in fetched {
                let i = try #require(Int(name.dropFirst()))
                #expect(FileManager.default.contents(atPath: out + "/many/" + name) == content(i), "\(name)")
            }
        }
    }
}
