import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Several `locker` processes at once against one store: a reader sees one
/// whole version of an object, never a mix, and nothing fails.
@Suite("locker store under concurrent processes, end to end")
struct StoreConcurrencyCLITests {
    /// A version's content is its 16-byte tag repeated; the sizes straddle
    /// chunk edges (the chunk size is a multiple of 16).
    static let tagLength = 16
    static let sizes = [16, 1024, storeChunk - 16, storeChunk, storeChunk + 16, 2 * storeChunk, 3 * storeChunk + 16]

    static func tag(writer: Int, version: Int) -> String {
        let digits = String(version)
        let text = "[w\(writer):" + String(repeating: "0", count: max(0, 6 - digits.count)) + digits + "]"
        return text + String(repeating: "-", count: tagLength - text.utf8.count)
    }

    static func content(tag: String, size: Int) -> Data {
        Data(String(repeating: tag, count: size / tagLength).utf8)
    }

    /// What the workers share.
    struct Shared: Sendable {
        /// Every version a writer started to store: tag → (path, size).
        var started: [String: (path: String, size: Int)] = [:]
        /// Versions whose put exited 0, by path, in completion order.
        var stored: [String: [String]] = [:]
        var gets = 0
        var successfulGets = 0
        var lists = 0
        var failures: [String] = []
    }

    @Test func concurrentPutsAndGetsNeverTear() throws {
        try withStoreFixture { f in
            try f.initialize()
            let environment = f.environment
            let root = f.root
            let writers = 3
            let readers = 3
            let sharedPaths = ["/shared-1", "/shared-2"]
            let ownPaths = (0..<writers).map { "/own/w\($0)" }
            let allPaths = sharedPaths + ownPaths
            let state = Box(Shared())
            let deadline = Date().addingTimeInterval(8)
            let done = DispatchGroup()

            for w in 0..<writers {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var version = 0
                    while Date() < deadline {
                        let path = version % 3 == 2 ? ownPaths[w] : sharedPaths[(version / 3 + w) % 2]
                        let size = Self.sizes[(version * 5 + w) % Self.sizes.count]
                        let tag = Self.tag(writer: w, version: version)
                        version += 1
                        let local = root + "/put-\(w)-\(version)"
                        guard FileManager.default.createFile(atPath: local, contents: Self.content(tag: tag, size: size)) else {
                            state.update { $0.failures.append("cannot write \(local)") }
                            return
                        }
                        state.update { $0.started[tag] = (path, size) }
                        do {
                            let r = try runLocker(environment: environment, ["put", local, path], timeout: 60)
                            if r.status == 0 {
                                state.update { $0.stored[path, default: []].append(tag) }
                            } else {
                                state.update { $0.failures.append("put \(path): \(r)") }
                            }
                        } catch {
                            state.update { $0.failures.append("put \(path): \(error)") }
                        }
                        try? FileManager.default.removeItem(atPath: local)
                    }
                }
            }

            for reader in 0..<readers {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var n = 0
                    while Date() < deadline {
                        n += 1
                        if reader == 0 && n % 5 == 0 {
                            // Listing while objects are replaced shows no
                            // damaged entries.
                            for dir in ["/", "/own"] {
                                guard let r = try? runLocker(environment: environment, ["ls", "--json", dir]) else { continue }
                                let ok = (r.status == 0 && !r.text.contains("damaged")) || (r.status == 66 && dir == "/own")
                                state.update {
                                    $0.lists += 1
                                    if !ok { $0.failures.append("ls during puts: \(r)") }
                                }
                            }
                            continue
                        }
                        let path = allPaths[(n + reader) % allPaths.count]
                        let storedBefore = state.value.stored[path] != nil
                        do {
                            let r = try runLocker(environment: environment, ["get", path], timeout: 60)
                            let problem = Self.check(r, path: path, storedBefore: storedBefore, started: state.value.started)
                            state.update {
                                $0.gets += 1
                                if r.status == 0 { $0.successfulGets += 1 }
                                if let problem { $0.failures.append(problem) }
                            }
                        } catch {
                            state.update { $0.failures.append("get \(path): \(error)") }
                        }
                    }
                }
            }

            #expect(done.wait(timeout: .now() + 120) == .success, "the workers did not finish")
            let final = state.value
            #expect(final.failures.isEmpty, "\(final.failures.count) failures, first: \(final.failures.prefix(5).joined(separator: "\n"))")
            #expect(final.successfulGets >= 20, "only \(final.successfulGets) of \(final.gets) gets succeeded")
            #expect(final.stored.values.map(\.count).reduce(0, +) >= 9, "only \(final.stored) stored")
            #expect(final.lists > 0)

            // At rest: each path holds one stored version (an own path its
            // writer's last), ls works, and no stray file is left.
            for path in allPaths {
                let versions = final.stored[path] ?? []
                let r = try f.raw(["get", path])
                guard let last = versions.last else {
                    #expect(r.status == 66, "\(r)")
                    continue
                }
                #expect(r.status == 0, "\(r)")
                let tag = String(decoding: r.stdout.prefix(Self.tagLength), as: UTF8.self)
                #expect(versions.contains(tag), "\(path) holds \(tag), which was never stored there")
                if ownPaths.contains(path) { #expect(tag == last, "\(path) holds \(tag), not its last version \(last)") }
                if let size = final.started[tag]?.size { #expect(r.stdout == Self.content(tag: tag, size: size)) }
            }
            let ls = try f.ok(["ls", "/"])
            #expect(ls.stdout == "own/\nshared-1\nshared-2\n", "\(ls)")
            let own = try f.ok(["ls", "/own"])
            #expect(own.stdout == ownPaths.filter { final.stored[$0] != nil }.map { ($0 as NSString).lastPathComponent + "\n" }.joined(),
                    "\(own)")
            #expect(f.storedData().count == allPaths.filter { final.stored[$0] != nil }.count,
                    "data of replaced versions was left: \(f.storedData())")
            let stray = try FileManager.default.subpathsOfDirectory(atPath: f.store).filter { $0.contains(".tmp") }
            #expect(stray.isEmpty, "temporary files left: \(stray)")
        }
    }

    /// `verify --repair`, run again and again while `put -r` stores a tree
    /// into an existing directory (each batch's headers staged as
    /// temporaries beside their entries until the batch commits), removes
    /// none of them: the import succeeds and the tree reads back whole.
    @Test func verifyRepairDuringTreeImport() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/t"])
            let tree = f.root + "/tree"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            let count = 4000
            for i in 0..<count {
                let body = Data((String(repeating: "file \(i) ", count: 1 + i % 50)).utf8)
                #expect(FileManager.default.createFile(atPath: tree + "/f\(i)", contents: body))
            }
            let environment = f.environment
            let put = Box<RawResult?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                put.update { $0 = try? runLocker(environment: environment, ["put", "-r", tree, "/t"], timeout: 120) }
                done.signal()
            }
            var verifies = 0
            var repairs: [RawResult] = []
            while done.wait(timeout: .now()) == .timedOut {
                let r = try f.raw(["verify", "--repair"], timeout: 120)
                verifies += 1
                if r.status != 0 || r.text.contains("removed") { repairs.append(r) }
            }
            let result = try #require(put.value)
            #expect(result.status == 0, "put -r during verify --repair (\(verifies) runs): \(result)")
            #expect(repairs.isEmpty, "verify --repair during the import: \(repairs)")
            #expect(verifies >= 1)
            let out = f.root + "/out"
            try f.ok(["get", "-r", "/t", out], timeout: 120)
            for i in 0..<count {
                #expect(FileManager.default.contents(atPath: out + "/f\(i)") == FileManager.default.contents(atPath: tree + "/f\(i)"),
                        "f\(i)")
            }
            try f.ok(["verify"])
        }
    }

    /// What is wrong with a `get` result, if anything: only exit 0 with one
    /// whole stored version, or 66 before any version was stored.
    static func check(_ r: RawResult, path: String, storedBefore: Bool,
                      started: [String: (path: String, size: Int)]) -> String? {
        switch r.status {
        case 0:
            let tag = String(decoding: r.stdout.prefix(tagLength), as: UTF8.self)
            guard let version = started[tag], version.path == path else {
                return "get \(path) returned \(r.stdout.count) bytes starting \(tag.debugDescription): no such version"
            }
            guard r.stdout == content(tag: tag, size: version.size) else {
                return "get \(path) returned a torn or wrong-sized \(tag): \(r.stdout.count) bytes, expected \(version.size)"
            }
            return nil
        case 66 where !storedBefore:
            return nil
        default:
            return "get \(path) (stored before: \(storedBefore)): \(r)"
        }
    }
}
