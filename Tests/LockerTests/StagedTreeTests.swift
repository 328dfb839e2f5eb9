import Foundation
import Locker
import LockerFormat
import Testing

/// New directories built out of sight (`Store.stageTree`), with objects
/// written at their final names inside them, and published at once.
@Suite struct StagedTreeTests {
    private typealias S = StoreSmokeTests

    private func read(_ store: Store, _ path: String) throws -> [UInt8] {
        var out: [UInt8] = []
        try store.read(try StorePath(path)) { out += $0 }
        return out
    }

    private func dataFileCount(_ root: String) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: root + "/data").count) ?? -1
    }

    /// `put -r` commits with ``Store/commitCounting(_:)``: the same commit
    /// as ``Store/commit(_:)``, reporting only how many objects it holds.
    @Test func aCountingCommitCommitsTheSame() throws {
        try S.withStore { store, root in
            try store.makeDirectory(try StorePath("/d"))
            let tree = try store.stageTree([try StorePath("/fresh")])
            let mixed = try store.stageBatch([try S.item("/fresh/a", [1]), try S.item("/d/b", [2]), try S.item("/d/c", S.noise(100_000))],
                                             into: tree)
            #expect(try store.commitCounting(mixed) == 3)
            #expect(throws: StoreError.self) { try store.commitCounting(mixed) }
            // Only objects in the tree: nothing to rename.
            #expect(try store.commitCounting(try store.stageBatch([try S.item("/fresh/e", [3])], into: tree)) == 1)
            #expect(try store.commitCounting(try store.stageBatch([])) == 0)
            try store.publish(tree)
            #expect(try read(store, "/fresh/a") == [1] && read(store, "/d/b") == [2] && read(store, "/fresh/e") == [3])
            #expect(try read(store, "/d/c") == S.noise(100_000))
            #expect(S.temporaries(under: root).isEmpty)
            #expect(try store.verify(readData: true).isClean)
        }
    }

    /// Nothing of the tree is visible before it is published, a verifier
    /// (even one repairing) leaves it alone while it is built, and once
    /// published every object reads back, inherited classes included.
    @Test func treeAppearsWholeWhenPublished() throws {
        try S.withStore { store, root in
            try store.makeDirectory(try StorePath("/d"), defaultClass: .complete)
            try store.putBatch([try S.item("/d/old", [9])])
            let large = S.noise(100_000)
            let tree = try store.stageTree([try StorePath("/d/new/x"), try StorePath("/fresh"), try StorePath("/d")])
            for new in ["/d/new", "/d/new/x", "/fresh"] { #expect(tree.isNew(try StorePath(new)), "\(new)") }
            #expect(!tree.isNew(try StorePath("/d")))
            #expect(!tree.isNew(.root))
            let staged = try store.stageBatch([
                try S.item("/d/new/x/small", [1, 2, 3]),
                try S.item("/fresh/large", large),
                try S.item("/d/plain", [4]),
            ], into: tree)
            let dataBefore = dataFileCount(root)
            let infos = try store.commit(staged)
            #expect(infos.map(\.path.description) == ["/d/new/x/small", "/fresh/large", "/d/plain"])
            // The large object's data file waits inside the tree.
            #expect(dataFileCount(root) == dataBefore)
            // Committed, not published: only the object in an existing
            // directory is there.
            #expect(try S.names(store, "/") == ["d"])
            #expect(try S.names(store, "/d") == ["old", "plain"])
            #expect(try read(store, "/d/plain") == [4])
            let report = try store.verify(repair: true)
            #expect(report.isClean && report.garbage.isEmpty, "\(report.garbage)")

            try store.publish(tree)
            #expect(dataFileCount(root) == dataBefore + 1)
            #expect(try S.names(store, "/") == ["d", "fresh"])
            #expect(try S.names(store, "/d") == ["new", "old", "plain"])
            #expect(try read(store, "/d/new/x/small") == [1, 2, 3])
            #expect(try read(store, "/fresh/large") == large)
            let small = try store.stat(try StorePath("/d/new/x/small"))
            guard case .object(let info) = small.kind else {
                Issue.record("/d/new/x/small is not an object")
                return
            }
            #expect(info.protectionClass == .complete)
            #expect(info.protectionSource == .inherited("/d"))
            #expect(S.temporaries(under: root).isEmpty)
            #expect(try store.verify(readData: true).isClean)
            #expect(throws: StoreError.self) { try store.publish(tree) }
            #expect(throws: StoreError.self) { try store.stageBatch([try S.item("/fresh/late", [5])], into: tree) }
        }
    }

    /// A tree released unpublished takes everything written into it, data
    /// files included; an object cannot take a new directory's name.
    @Test func unpublishedTreeLeavesNothing() throws {
        try S.withStore { store, root in
            try store.putBatch([try S.item("/keep", [7])])
            let before = dataFileCount(root)
            do {
                let tree = try store.stageTree([try StorePath("/t/a")])
                #expect(throws: StoreError.isADirectory("/t/a")) {
                    try store.stageBatch([try S.item("/t/a", [1])], into: tree)
                }
                try store.commit(try store.stageBatch([try S.item("/t/a/big", S.noise(100_000)), try S.item("/t/s", [1])], into: tree))
                #expect(dataFileCount(root) == before, "the data file waits inside the tree")
                #expect(S.temporaries(under: root).contains { $0.hasSuffix("/data") }, "\(S.temporaries(under: root))")
            }
            #expect(dataFileCount(root) == before)
            #expect(S.temporaries(under: root).isEmpty)
            #expect(try S.names(store, "/") == ["keep"])
            #expect(try store.verify().isClean)
        }
    }

    /// However many subtrees a tree creates, they are built in one
    /// temporary directory, so building them holds one descriptor (one
    /// lock each would run into the descriptor limit).
    @Test func manySubtreesShareOneTemporaryDirectory() throws {
        try S.withStore { store, root in
            try store.makeDirectory(try StorePath("/e"))
            let tree = try store.stageTree(try (0..<1_200).map { try StorePath("/e/d\($0)") })
            let temporaries = S.temporaries(under: root)
            #expect(temporaries.count == 2 + 1_200 * 2, "the directory, its data directory, and each subtree with its record")
            #expect(temporaries.allSatisfy { $0.hasPrefix("ns/.tmp-dir-") }, "\(temporaries.prefix(3))")
            try store.commit(try store.stageBatch([try S.item("/e/d1199/x", [3])], into: tree))
            try store.publish(tree)
            #expect(try S.names(store, "/e").count == 1_200)
            #expect(try read(store, "/e/d1199/x") == [3])
            #expect(S.temporaries(under: root).isEmpty)
        }
    }

    /// A subtree whose parent was removed and made again meanwhile (a new
    /// directory ID, under which the subtree's sealed name would not
    /// open) is refused naming the parent, and removed with its data; the
    /// store stays undamaged.
    @Test func replacedParentIsRefused() throws {
        try S.withStore { store, root in
            try store.makeDirectory(try StorePath("/e"))
            let before = dataFileCount(root)
            let tree = try store.stageTree([try StorePath("/e/d")])
            try store.commit(try store.stageBatch([try S.item("/e/d/big", S.noise(100_000))], into: tree))
            try store.remove(try StorePath("/e"), recursive: true)
            try store.makeDirectory(try StorePath("/e"))
            #expect(throws: StoreError.notFound("/e")) { try store.publish(tree) }
            #expect(try S.names(store, "/e").isEmpty)
            #expect(dataFileCount(root) == before)
            #expect(S.temporaries(under: root).isEmpty)
            let report = try store.verify()
            #expect(report.isClean && report.damaged.isEmpty, "\(report.damaged)")
        }
    }

    /// A subtree whose place another writer took meanwhile is removed with
    /// what was written into it; the others are published; the error names
    /// it.
    @Test func takenPlaceIsRefused() throws {
        try S.withStore { store, root in
            let before = dataFileCount(root)
            let tree = try store.stageTree([try StorePath("/x/y"), try StorePath("/z")])
            try store.commit(try store.stageBatch([try S.item("/x/y/big", S.noise(100_000)), try S.item("/z/s", [2])], into: tree))
            try store.makeDirectory(try StorePath("/x"))
            #expect(throws: StoreError.alreadyExists("/x")) { try store.publish(tree) }
            #expect(try S.names(store, "/") == ["x", "z"])
            #expect(try S.names(store, "/x").isEmpty)
            #expect(try read(store, "/z/s") == [2])
            #expect(dataFileCount(root) == before)
            #expect(S.temporaries(under: root).isEmpty)
            #expect(try store.verify().isClean)
        }
    }
}
