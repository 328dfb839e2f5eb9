import Foundation
import Locker
import Testing

/// What a store tells its ``TemporaryCleanups`` of the temporaries it
/// writes: running every cleanup registered at a moment between two of
/// its steps (as a process that ends at once on a signal does) takes
/// everything the operation under way had written and nothing else, and
/// once an operation has returned nothing of it is registered, so no
/// cleanup can take a stored object's data.
@Suite struct TemporaryCleanupsTests {
    private typealias S = StoreSmokeTests

    /// Registers as a process would, and runs the cleanups when told.
    final class Recorder: TemporaryCleanups, @unchecked Sendable {
        private let lock = NSLock()
        private var cleanups: [Int: @Sendable () -> Void] = [:]
        private var next = 0

        func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T { try body() }

        func registerCleanup(_ cleanup: @escaping @Sendable () -> Void) -> Int {
            lock.withLock {
                next += 1
                cleanups[next] = cleanup
                return next
            }
        }

        func unregisterCleanup(_ token: Int) {
            lock.withLock { _ = cleanups.removeValue(forKey: token) }
        }

        var registered: Int { lock.withLock { cleanups.count } }

        /// What a process ending now would do.
        func runAll() {
            for cleanup in lock.withLock({ Array(cleanups.values) }) { cleanup() }
        }
    }

    struct Ended: Error {}

    private func dataFiles(_ root: String) -> Set<String> {
        Set((try? FileManager.default.contentsOfDirectory(atPath: root + "/data")) ?? [])
    }

    /// A tree staged with objects written into it, and a batch beside it
    /// with data files and header temporaries, neither committed: the
    /// cleanups take all of it.
    @Test func stagedTreeAndBatchGoWithTheirCleanups() throws {
        let recorder = Recorder()
        try S.withStore(temporaries: recorder) { store, root in
            try store.putBatch([try S.item("/d/keep", [7]), try S.item("/d/large", S.noise(100_000))])
            #expect(recorder.registered == 0)
            let before = dataFiles(root)
            let tree = try store.stageTree([try StorePath("/d/new"), try StorePath("/fresh/x")])
            let inTree = try store.stageBatch([try S.item("/d/new/small", [1]), try S.item("/fresh/x/large", S.noise(90_000))],
                                              into: tree)
            try store.commit(inTree)
            let beside = try store.stageBatch([try S.item("/d/plain", S.noise(80_000)), try S.item("/d/keep", [8]),
                                               try S.item("/d/new/late", [2])], into: tree)
            #expect(!S.temporaries(under: root).isEmpty)
            #expect(recorder.registered == 1 + 2 + 1, "the tree's directory, two header temporaries, one data file")
            recorder.runAll()
            #expect(S.temporaries(under: root).isEmpty, "\(S.temporaries(under: root))")
            #expect(dataFiles(root) == before)
            withExtendedLifetime((tree, beside)) {}
        }
    }

    /// A put stopped once its data file is written, before its header
    /// is, leaves nothing once the cleanups have run; puts, batches and
    /// published trees that returned leave nothing registered, and
    /// running the cleanups then changes nothing.
    @Test func finishedOperationsLeaveNothingRegistered() throws {
        let recorder = Recorder()
        try S.withStore(temporaries: recorder) { store, root in
            let large = S.noise(300_000)
            try store.put(try StorePath("/a/big"), bytes: large)
            try store.putBatch([try S.item("/a/b/one", S.noise(70_000)), try S.item("/a/two", [2])])
            let tree = try store.stageTree([try StorePath("/t/u")])
            try store.commit(try store.stageBatch([try S.item("/t/u/x", S.noise(60_000))], into: tree))
            try store.publish(tree)
            try store.makeDirectory(try StorePath("/m"))
            #expect(recorder.registered == 0)
            recorder.runAll()
            #expect(try store.verify(readData: true).isClean)

            let before = dataFiles(root)
            var given = 0
            #expect(throws: Ended.self) {
                try store.put(try StorePath("/a/cut"), from: { buffer in
                    if given == large.count {
                        // The data is all given: the signal comes before
                        // the header is written.
                        #expect(recorder.registered == 1)
                        recorder.runAll()
                        throw Ended()
                    }
                    let n = min(buffer.count, large.count - given)
                    buffer.copyBytes(from: large[given..<(given + n)])
                    given += n
                    return n
                })
            }
            #expect(recorder.registered == 0)
            #expect(dataFiles(root) == before)
            #expect(S.temporaries(under: root).isEmpty)
            #expect(try store.verify().isClean)
        }
    }
}
