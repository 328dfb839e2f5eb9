import Foundation
@testable import LockerStore
import Synchronization
import Testing

/// Listings read ahead for a tree fetch (`ListingsAhead`), in the order
/// the fetch enters the directories.
@Suite struct ListingsAheadTests {
    private typealias S = StoreSmokeTests

    /// /t with files at every level, three subdirectories, one of them
    /// with its own subdirectory.
    private func makeTree(_ store: Store) throws {
        var items: [PutBatchItem] = []
        for path in ["/t/f", "/t/a/f1", "/t/a/f2", "/t/a/x/f", "/t/b/f", "/t/c/f1", "/t/c/f2", "/t/c/f3"] {
            items.append(try S.item(path, Array(path.utf8)))
        }
        try store.putBatch(items)
    }

    /// The order a fetch enters the tree in: depth first, a directory's
    /// subdirectories by name, each with everything below it first.
    private let order = ["/t", "/t/a", "/t/a/x", "/t/b", "/t/c"]

    private func objectNames(_ listing: FetchListing) -> [String] { listing.objects.map(\.path.description) }

    /// The names of the directories in the local directory `path`.
    private func subdirectories(of path: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { name in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory) && isDirectory.boolValue
        }
    }

    @Test(arguments: [1, 2, 3])
    func listingsComeInTheOrderAFetchEntersTheTree(count: Int) throws {
        try S.withStore { store, _ in
            try makeTree(store)
            let ahead = ListingsAhead(store, from: try StorePath("/t"), count: count)
            defer { ahead.stop() }
            // Walked as the fetch walks: a stack, each listing's
            // subdirectories pushed in reverse.
            var stack = [try StorePath("/t")]
            var entered: [String] = []
            while let path = stack.popLast() {
                let listing = try ahead.listing(of: path)
                let direct = try store.listForFetch(path)
                #expect(objectNames(listing) == objectNames(direct), "\(path)")
                #expect(listing.directories == direct.directories, "\(path)")
                entered.append(path.description)
                stack.append(contentsOf: listing.directories.reversed())
            }
            #expect(entered == order)
            #expect(ahead.isReadingAhead, "every listing was the next in its order")
        }
    }

    /// Asked out of order, it answers from the store; so it does for every
    /// later question, and stopping it twice is harmless.
    @Test func askedOutOfOrderItListsWhenAsked() throws {
        try S.withStore { store, _ in
            try makeTree(store)
            let ahead = ListingsAhead(store, from: try StorePath("/t"), count: 2)
            #expect(ahead.isReadingAhead)
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/c"))) == ["/t/c/f1", "/t/c/f2", "/t/c/f3"])
            #expect(!ahead.isReadingAhead)
            #expect(objectNames(try ahead.listing(of: try StorePath("/t"))) == ["/t/f"])
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/a/x"))) == ["/t/a/x/f"])
            ahead.stop()
            ahead.stop()
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/b"))) == ["/t/b/f"])
        }
    }

    /// If its thread cannot be started (the process's thread limit), every
    /// listing is read when asked for, in any order, and nothing waits.
    @Test func withoutItsThreadItListsWhenAsked() throws {
        try S.withStore { store, _ in
            try makeTree(store)
            let ahead = ListingsAhead(store, from: try StorePath("/t"), count: 2, inlineBudget: Store.fetchInlineBudget) { _ in false }
            // The first listing on a thread of its own, so that one waiting
            // for a thread never started fails the test instead of hanging
            // the run (the stop below releases it).
            let first = Mutex<[String]?>(nil)
            let finished = DispatchSemaphore(value: 0)
            let top = try StorePath("/t")
            Thread {
                defer { finished.signal() }
                let names = (try? ahead.listing(of: top)).map { $0.objects.map(\.path.description) }
                first.withLock { $0 = names }
            }.start()
            let answered = finished.wait(timeout: .now() + 30) == .success
            ahead.stop()
            #expect(answered, "a listing waited for a thread never started")
            #expect(first.withLock { $0 } == objectNames(try store.listForFetch(top)))
            for path in order.dropFirst() {
                let listing = try ahead.listing(of: try StorePath(path))
                #expect(objectNames(listing) == objectNames(try store.listForFetch(try StorePath(path))), "\(path)")
            }
            #expect(!ahead.isReadingAhead)
        }
    }

    /// Stopped before anything is taken, it reads no more ahead, and a
    /// listing asked for afterwards is still that directory's.
    @Test func stoppedBeforeTakingAnything() throws {
        try S.withStore { store, _ in
            try makeTree(store)
            let ahead = ListingsAhead(store, from: try StorePath("/t"), count: 1)
            ahead.stop()
            #expect(!ahead.isReadingAhead)
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/a"))) == ["/t/a/f1", "/t/a/f2"])
        }
    }

    /// A listing that fails is handed on as its error, in its turn, and
    /// the walk goes on with the next directory: nothing below the one
    /// that failed is listed.
    @Test func aFailedListingIsHandedOnInItsTurn() throws {
        try S.withStore { store, root in
            try makeTree(store)
            // /t/a's record: of the directories two levels down, the one
            // that holds a directory of its own.
            let ns = root + "/ns"
            let t = ns + "/" + subdirectories(of: ns)[0]
            let a = try #require(subdirectories(of: t).map { t + "/" + $0 }.first { !subdirectories(of: $0).isEmpty })
            let record = a + "/.dir"
            var bytes = try #require(FileManager.default.contents(atPath: record))
            bytes[bytes.count - 1] ^= 1
            try bytes.write(to: URL(fileURLWithPath: record))

            let ahead = ListingsAhead(store, from: try StorePath("/t"), count: 2)
            defer { ahead.stop() }
            #expect(objectNames(try ahead.listing(of: try StorePath("/t"))) == ["/t/f"])
            #expect(throws: StoreError.self) { try ahead.listing(of: try StorePath("/t/a")) }
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/b"))) == ["/t/b/f"])
            #expect(objectNames(try ahead.listing(of: try StorePath("/t/c"))) == ["/t/c/f1", "/t/c/f2", "/t/c/f3"])
            // /t/a/x was never listed: /t/b came next, as the fetch asks.
            #expect(ahead.isReadingAhead)
        }
    }
}
