import Foundation
@testable import LockerStore
import Testing

/// The order a batch's objects are written in (`Store.orderedForWriting`):
/// the batch split between directories into one part per worker, the
/// parts interleaved.
@Suite struct WriteOrderTests {
    private func items(_ paths: [String]) throws -> [PutBatchItem] {
        try paths.map { PutBatchItem(path: try StorePath($0)) { _ in 0 } }
    }

    private func ordered(_ paths: [String], ways: Int) throws -> [String] {
        Store.interleavingDirectories(try items(paths), ways: ways).map(\.path.description)
    }

    /// Parts taken in turn, a part that ran out passed over: what both
    /// `put -r`'s batch order and `get -r`'s pairs of groups use.
    @Test func partsTakenInTurn() {
        #expect(takingTurns([[1, 2, 3], [4], [], [5, 6]]) == [1, 4, 5, 2, 6, 3])
        #expect(takingTurns([[Int]]()) == [])
        #expect(takingTurns([[], [7]]) == [7])
    }

    @Test func oneDirectoryOrOneWorkerKeepsTheOrder() throws {
        let one = ["/d/a", "/d/b", "/d/c", "/d/d"]
        #expect(try ordered(one, ways: 2) == one)
        #expect(try ordered(one, ways: 8) == one)
        let several = ["/a/1", "/a/2", "/b/1", "/b/2"]
        #expect(try ordered(several, ways: 1) == several)
        #expect(try ordered([], ways: 2) == [])
        #expect(try ordered(["/x"], ways: 2) == ["/x"])
    }

    /// Cut between directories nearest half the batch, the halves taken
    /// in turn; the rest of the longer half follows in its order.
    @Test func twoWaysCutsBetweenDirectoriesAndAlternates() throws {
        let paths = ["/a/1", "/a/2", "/a/3", "/b/1", "/b/2", "/c/1", "/c/2", "/c/3"]
        #expect(try ordered(paths, ways: 2) == ["/a/1", "/b/1", "/a/2", "/b/2", "/a/3", "/c/1", "/c/2", "/c/3"])
        let even = ["/a/1", "/a/2", "/a/3", "/b/1", "/b/2", "/b/3"]
        #expect(try ordered(even, ways: 2) == ["/a/1", "/b/1", "/a/2", "/b/2", "/a/3", "/b/3"])
        // Objects in the root and in a directory are in two directories.
        #expect(try ordered(["/x", "/y", "/d/x", "/d/y"], ways: 2) == ["/x", "/d/x", "/y", "/d/y"])
    }

    /// Names that differ only in Unicode normalization are different
    /// directories, as the store tells them apart.
    @Test func directoriesAreToldApartByTheirBytes() throws {
        let composed = "/\u{E9}", decomposed = "/e\u{301}"
        #expect(try StorePath(composed + "/x").parent != StorePath(decomposed + "/x").parent)
        #expect(try ordered([composed + "/1", composed + "/2", decomposed + "/1", decomposed + "/2"], ways: 2)
            == [composed + "/1", decomposed + "/1", composed + "/2", decomposed + "/2"])
    }

    /// A directory's files split around a subdirectory's, as a walk puts
    /// them, are one directory: all in one part, in their order.
    @Test func aDirectorySplitByASubdirectoryStaysInOnePart() throws {
        let paths = ["/a/a1", "/a/a2", "/a/b/x", "/a/c1", "/a/c2", "/a/c3"]
        #expect(try ordered(paths, ways: 2) == ["/a/a1", "/a/b/x", "/a/a2", "/a/c1", "/a/c2", "/a/c3"])
        let nested = ["/a/1", "/a/s/1", "/a/s/2", "/a/2", "/a/t/1", "/a/t/2", "/a/3"]
        #expect(try ordered(nested, ways: 2) == ["/a/1", "/a/s/1", "/a/2", "/a/s/2", "/a/3", "/a/t/1", "/a/t/2"])
    }

    /// A batch in that order, its small sources read ahead by a window
    /// started for the same order, stores each object's own bytes; a
    /// window started for the batch in another order is refused before
    /// anything is written.
    @Test func aBatchInThatOrderStoresEachObjectsOwnBytes() throws {
        try StoreSmokeTests.withStore { store, _ in
            var contents: [(path: String, data: [UInt8])] = []
            for d in 0..<4 {
                for f in 0..<(5 + d) {
                    let path = "/d\(d)/f\(f)"
                    contents.append((path, Array("\(path) ".utf8) + StoreSmokeTests.noise(100 * (f + 1) + d)))
                }
            }
            // Each source with its length, so that it is read ahead; made
            // anew for each batch, as a source is read once.
            func items() throws -> [PutBatchItem] {
                var items: [PutBatchItem] = []
                for (path, data) in contents {
                    var item = try StoreSmokeTests.item(path, data)
                    item.expectedLength = UInt64(data.count)
                    items.append(item)
                }
                return items
            }
            let refused = store.orderedForWriting(try items())
            #expect(refused.map(\.path) != (try items()).map(\.path), "two workers: the directories are interleaved")
            #expect(throws: StoreError.self) { try store.stageBatch(refused, readAhead: store.readAhead(try items())) }
            #expect(try StoreSmokeTests.names(store, "/").isEmpty)
            let ordered = store.orderedForWriting(try items())
            try store.commit(try store.stageBatch(ordered, readAhead: store.readAhead(ordered)))
            for (path, data) in contents {
                var read: [UInt8] = []
                try store.read(try StorePath(path)) { read += $0 }
                #expect(read == data, "\(path)")
            }
        }
    }

    /// Whatever the batch: the same items, each once; each directory's
    /// items in their order; and with directories of equal size in even
    /// number, no two neighbours in the same directory.
    @Test func aPermutationThatKeepsEachDirectorysOrder() throws {
        // Every count of directories up to 8, of sizes 1–12 in many
        // mixes, with 1–4 ways.
        for dirs in 0...8 {
            for mix in 0..<12 {
                var paths: [String] = []
                for d in 0..<dirs {
                    let files: Int = 1 + (d * 7 + mix * 5) % 12
                    for f in 0..<files { paths.append("/d\(d)/f\(f)") }
                }
                // Also with the directories' files mixed, as a walk that
                // goes into subdirectories between a directory's files
                // gives them: each directory's in their order still.
                // (Every directory's first file, then every second, …)
                func key(_ path: String) -> (file: Int, directory: Int) {
                    let parts = path.split(separator: "/")
                    return (Int(parts[1].dropFirst())!, Int(parts[0].dropFirst())!)
                }
                let mixed = paths.sorted { key($0) < key($1) }
                for (paths, ways) in [1, 2, 3, 4].flatMap({ ways in [(paths, ways), (mixed, ways)] }) {
                    let result = try ordered(paths, ways: ways)
                    #expect(result.sorted() == paths.sorted(), "\(paths), \(ways) ways")
                    for d in 0..<dirs {
                        let prefix = "/d\(d)/"
                        #expect(result.filter { $0.hasPrefix(prefix) } == paths.filter { $0.hasPrefix(prefix) }, "\(paths), \(ways) ways")
                    }
                }
            }
        }
        for (dirs, files, ways) in [(2, 50, 2), (4, 30, 2), (4, 30, 4), (6, 7, 3)] {
            let paths = (0..<dirs).flatMap { d in (0..<files).map { "/d\(d)/f\($0)" } }
            let result = try ordered(paths, ways: ways)
            let parents = result.map { $0.split(separator: "/")[0] }
            #expect(!zip(parents, parents.dropFirst()).contains { $0 == $1 }, "\(dirs) × \(files), \(ways) ways: \(result)")
        }
    }
}
