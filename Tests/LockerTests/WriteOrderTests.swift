import Foundation
@testable import Locker
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

    @Test func oneDirectoryOrOneWorkerKeepsTheOrder() throws {
        let one = ["/d/a", "/d/b", "/d/c", "/d/d"]
        #expect(try ordered(one, ways: 2) == one)
        #expect(try ordered(one, ways: 8) == one)
        let several = ["/a/1", "/a/2", "/b/1", "/b/2"]
        #expect(try ordered(several, ways: 1) == several)
        #expect(try ordered([], ways: 2) == [])
        #expect(try ordered(["/x"], ways: 2) == ["/x"])
    }

    /// Cut at the run boundary nearest half the batch, the halves taken in
    /// turn; the rest of the longer half follows in its order.
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
        #expect(try !StorePath(composed + "/x").hasSameParent(as: StorePath(decomposed + "/x")))
        #expect(try StorePath(composed + "/x").hasSameParent(as: StorePath(composed + "/y")))
        #expect(try StorePath("/x").hasSameParent(as: StorePath("/y")))
        #expect(try !StorePath("/x").hasSameParent(as: StorePath("/d/x")))
        #expect(try ordered([composed + "/1", composed + "/2", decomposed + "/1", decomposed + "/2"], ways: 2)
            == [composed + "/1", decomposed + "/1", composed + "/2", decomposed + "/2"])
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
                for ways in 1...4 {
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
