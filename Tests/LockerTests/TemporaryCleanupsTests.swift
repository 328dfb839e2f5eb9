import Foundation
import Locker
import LockerFormat
import LockerIO
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
        private var placing: Set<Int> = []
        private var next = 0

        /// Holds under way (cleanups run only when told, so a hold holds
        /// nothing off; it is counted).
        private var holds = 0

        func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
            lock.withLock { holds += 1 }
            defer { lock.withLock { holds -= 1 } }
            return try body()
        }

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

        func markPlacing(_ tokens: [Int], _ placing: Bool) {
            lock.withLock { if placing { self.placing.formUnion(tokens) } else { self.placing.subtract(tokens) } }
        }

        var registered: Int { lock.withLock { cleanups.count } }

        /// What a process ending now would do.
        func runAll() {
            for cleanup in lock.withLock({ Array(cleanups.values) }) { cleanup() }
        }

        /// What a process ending now without waiting for the store (a
        /// thread of it stuck on the disk) would do: every cleanup but
        /// those of temporaries being put in place. Returns how many ran.
        func runAllButPlacing() {
            for cleanup in lock.withLock({ cleanups.filter { !placing.contains($0.key) }.map(\.value) }) { cleanup() }
        }

        /// While armed, every successful rename is followed by
        /// ``runAllButPlacing()``, counted in `endsAfterRename`.
        var isArmed: Bool {
            get { lock.withLock { armed } }
            set { lock.withLock { armed = newValue } }
        }
        private var armed = false
        private(set) var endsAfterRename = 0
        /// The temporaries renamed while armed outside any hold, with
        /// none being placed: not told of.
        private(set) var renamedUntold: [String] = []

        func afterRename(_ source: String, _ result: Int32) -> Int32 {
            guard result == 0, isArmed else { return result }
            lock.withLock {
                endsAfterRename += 1
                let name = (source as NSString).lastPathComponent
                if name.contains(".tmp-"), holds == 0, placing.isEmpty { renamedUntold.append(name) }
            }
            runAllButPlacing()
            return result
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

    /// A process that cannot wait for the store (a thread of it stuck on
    /// the disk) and ends just after a rename has put temporaries in
    /// place, before their cleanups are unregistered, leaves them: a put's
    /// header and data file, a batch's, and the data files and subtree a
    /// publication moves out of a staged tree. Each object reads back
    /// whole and the store verifies clean.
    @Test func anEndThatCannotWaitLeavesWhatIsBeingPutInPlace() throws {
        let recorder = Recorder()
        var syscalls = Syscalls.system
        let rename = syscalls.rename, renameNoReplace = syscalls.renameNoReplace
        syscalls.rename = { recorder.afterRename($0, rename($0, $1)) }
        syscalls.renameNoReplace = { recorder.afterRename($0, renameNoReplace($0, $1)) }
        try S.withStore(temporaries: recorder, fileSystem: FileSystem(syscalls: syscalls)) { store, _ in
            func armed(_ body: () throws -> Void) rethrows {
                recorder.isArmed = true
                defer { recorder.isArmed = false }
                try body()
            }
            func content(_ path: String) throws -> [UInt8] {
                var out: [UInt8] = []
                try store.read(StorePath(path)) { out.append(contentsOf: $0) }
                return out
            }
            let one = S.noise(200_000), two = S.noise(150_000), three = S.noise(120_000)
            try armed { try store.put(try StorePath("/p/one"), bytes: one) }
            try armed { try store.putBatch([try S.item("/p/two", two)]) }
            let tree = try store.stageTree([try StorePath("/t/u")])
            try store.commit(try store.stageBatch([try S.item("/t/u/three", three)], into: tree))
            try armed { try store.publish(tree) }
            #expect(recorder.endsAfterRename >= 4, "an end after each rename")
            // Headers and directory records written in place of others.
            try armed {
                try store.setDefaultClass(.complete, ofDirectory: StorePath("/p"))
                try store.setClass(StorePath("/p/one"), to: .completeUntilFirstUserAuthentication)
                _ = try store.move(StorePath("/p/two"), to: StorePath("/t/two"))
                _ = try store.move(StorePath("/t/u"), to: StorePath("/p/u"))
                _ = try store.makeDirectory(StorePath("/p/u"), defaultClass: ProtectionClass.none, parents: true)
            }
            #expect(recorder.renamedUntold == [], "each rename puts a temporary the cleanups were told of in place")
            #expect(recorder.endsAfterRename >= 10)
            #expect(try content("/p/one") == one)
            #expect(try content("/t/two") == two)
            #expect(try content("/p/u/three") == three)
            #expect(recorder.registered == 0)
            #expect(try store.verify(readData: true).isClean)
        }
    }
}
