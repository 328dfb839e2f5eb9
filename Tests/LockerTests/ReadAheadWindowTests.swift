import Foundation
@testable import LockerStore
import LockerFormat
import LockerIO
import Synchronization
import Testing

@Suite("Read-ahead window")
struct ReadAheadWindowTests {
    /// An object given up by its writer (which failed before it asked for
    /// its source) while a reader is still reading it into the window: its
    /// space is not wiped or handed to another object until that read is
    /// done, and the object's release waits for it.
    @Test func releaseWaitsForTheReadUnderWay() throws {
        let entered = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let readDone = Mutex(false)
        var first = true
        let slow = PutBatchItem(path: try StorePath("/slow"), expectedLength: 10) { buffer in
            guard first else { return 0 }
            first = false
            entered.signal()
            proceed.wait()
            buffer.copyBytes(from: [UInt8](repeating: 7, count: 10))
            readDone.withLock { $0 = true }
            return 10
        }
        var given = false
        let quick = PutBatchItem(path: try StorePath("/quick"), expectedLength: 3) { buffer in
            guard !given else { return 0 }
            given = true
            buffer.copyBytes(from: [1, 2, 3])
            return 3
        }
        let window = ReadAheadWindow([slow, quick], enabled: true)
        defer { window.stop() }
        // A reader has reserved the slow object and is inside its source.
        entered.wait()

        let released = Mutex(false)
        let releaser = DispatchGroup()
        releaser.enter()
        Thread {
            window.release(0)
            released.withLock { $0 = true }
            releaser.leave()
        }.start()
        Thread.sleep(forTimeInterval: 0.2)
        #expect(!released.withLock { $0 }, "released while its reader was still writing into the window")

        proceed.signal()
        #expect(releaser.wait(timeout: .now() + 10) == .success, "the release did not end once the read had")
        #expect(readDone.withLock { $0 })

        // The other object is read and given as usual.
        var bytes = [UInt8](repeating: 0, count: 8)
        let source = try window.take(1).source
        let n = try bytes.withUnsafeMutableBytes { try source($0) }
        #expect(Array(bytes[..<n]) == [1, 2, 3])
        window.release(1)
    }

    /// A source that gives `data`, a piece of at most `piece` bytes a call.
    static func giving(_ data: [UInt8], piece: Int = 1 << 20) -> (UnsafeMutableRawBufferPointer) throws -> Int {
        var offset = 0
        return { buffer in
            let n = min(buffer.count, piece, data.count - offset)
            buffer.copyBytes(from: data[offset..<(offset + n)])
            offset += n
            return n
        }
    }

    /// `take` hands over the bytes read ahead as the whole object exactly
    /// when the source ended within them: not for a source that gave more
    /// than expected (even one byte more), nor for one not read ahead; the
    /// source it returns gives every byte either way.
    /// Whether read ahead by readers or, where the policy says the
    /// sources are in the page cache, by each writer as it takes its
    /// object: the same.
    @Test(arguments: [true, false])
    func takeHandsOverWholeOnlyWhatEnded(readers: Bool) throws {
        let cases: [(name: String, data: [UInt8], expected: UInt64?, whole: Bool)] = [
            ("exact", Array(repeating: 1, count: 5000), 5000, true),
            ("empty", [], 0, true),
            ("shrank", Array(repeating: 2, count: 300), 4000, true),
            ("inPieces", (0..<3000).map { UInt8(truncatingIfNeeded: $0) }, 3000, true),
            ("grewByOne", Array(repeating: 3, count: 1001), 1000, false),
            ("grew", (0..<90_000).map { UInt8(truncatingIfNeeded: $0 * 7) }, 10, false),
            ("unknownLength", Array(repeating: 4, count: 100), nil, false),
            ("pastInlineLimit", Array(repeating: 5, count: 60_000), 60_000, false),
        ]
        let items = try cases.map { c in
            PutBatchItem(path: try StorePath("/" + c.name), expectedLength: c.expected,
                         source: Self.giving(c.data, piece: c.name == "inPieces" ? 700 : 1 << 20))
        }
        let policy = ReadAheadPolicy()
        if !readers { policy.learn(sourcesWaitedForStorage: false) }
        let started = Mutex(0)
        let window = ReadAheadWindow(items, enabled: true, policy: policy, startThread: { body in
            started.withLock { $0 += 1 }
            return DetachedThread.start(body)
        }, blocksRead: { 0 })
        defer { window.stop() }
        #expect(started.withLock { $0 } == (readers ? 6 : 0), "readers started for the six sources read ahead")
        for (i, c) in cases.enumerated() {
            let taken = try window.take(i)
            if c.whole {
                #expect(taken.whole.map { Array($0) } == c.data, "\(c.name)")
            } else {
                #expect(taken.whole == nil, "\(c.name)")
            }
            var out: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = try buffer.withUnsafeMutableBytes { try taken.source($0) }
                if n == 0 { break }
                out += buffer[..<n]
            }
            #expect(out == c.data, "\(c.name)")
            window.release(i)
        }
    }

    /// Many more objects than the window holds, of sizes from empty to
    /// the inline limit, taken in index order by two writers: every one
    /// is handed over whole, with its own bytes, while the readers reserve
    /// runs of them and the ring wraps round many times; objects given up
    /// unread in the middle (as a failed writer gives them up) are skipped
    /// without holding the others back.
    @Test func manyObjectsFlowThroughTheWindowInOrder() throws {
        // Sizes spread by multiplying by primes: mostly up to 16 KiB,
        // every fifth up to the inline limit, some empty.
        var sizes: [Int] = []
        var total = 0
        while total < 6 * ReadAheadWindow.capacity {
            let i = sizes.count
            let size = i % 5 == 0 ? (i &* 104_729) % (ObjectHeader.maxInlineDataLength + 1) : (i &* 7_919) % 16_384
            sizes.append(size)
            total += size
        }
        let data = sizes.enumerated().map { i, size in
            (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i &* 7) }
        }
        let items = try data.enumerated().map { i, bytes in
            PutBatchItem(path: try StorePath("/o\(i)"), expectedLength: UInt64(bytes.count),
                         source: Self.giving(bytes, piece: 4096))
        }
        let givenUp: Set<Int> = [3, 4, 100, 101, 102, items.count - 1]
        let window = ReadAheadWindow(items, enabled: true)
        defer { window.stop() }
        let count = items.count
        let next = Mutex(0)
        let mismatches = Mutex<[Int]>([])
        let writers = DispatchGroup()
        for _ in 0..<2 {
            writers.enter()
            Thread {
                defer { writers.leave() }
                while true {
                    let i = next.withLock { n -> Int in
                        defer { n += 1 }
                        return n
                    }
                    guard i < count else { return }
                    if givenUp.contains(i) {
                        window.release(i)
                        continue
                    }
                    let whole = try? window.take(i).whole
                    if whole.map({ Array($0) }) != data[i] { mismatches.withLock { $0.append(i) } }
                    window.release(i)
                }
            }.start()
        }
        #expect(writers.wait(timeout: .now() + 60) == .success, "the writers did not finish: a deadlock")
        #expect(mismatches.withLock { $0 }.isEmpty, "objects handed over with other bytes")
        #expect(items.count > 400)
    }

    /// With no reader started (the process's thread limit), every object
    /// is handed over from its own source, whole, and nothing waits; with
    /// only one of the eight started, that one reads every object.
    @Test(arguments: [0, 1])
    func fewerReadersThanAskedFor(readers: Int) throws {
        let data = (0..<40).map { i in (0..<(i * 997 % 9000)).map { UInt8(truncatingIfNeeded: $0 &+ i) } }
        let items = try data.enumerated().map { i, bytes in
            PutBatchItem(path: try StorePath("/r\(i)"), expectedLength: UInt64(bytes.count), source: Self.giving(bytes))
        }
        let started = Mutex(0)
        let window = ReadAheadWindow(items, enabled: true) { body in
            let may = started.withLock { n in
                defer { n += 1 }
                return n < readers
            }
            return may && DetachedThread.start(stackSize: 1 << 20, body)
        }
        defer { window.stop() }
        // On a thread of its own, so that a take that waits for a reader
        // never started fails the test instead of hanging the run.
        let results = Mutex<[(out: [UInt8], whole: [UInt8]?)]>([])
        let finished = DispatchSemaphore(value: 0)
        Thread {
            defer { finished.signal() }
            for i in data.indices {
                guard let taken = try? window.take(i) else { return }
                var out: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while let n = try? buffer.withUnsafeMutableBytes({ try taken.source($0) }), n > 0 { out += buffer[..<n] }
                let whole = taken.whole.map { Array($0) }
                results.withLock { $0.append((out, whole)) }
                window.release(i)
            }
        }.start()
        #expect(finished.wait(timeout: .now() + 30) == .success, "a take waited for a reader that never started")
        let got = results.withLock { $0 }
        #expect(got.count == data.count)
        for (i, result) in got.enumerated() {
            #expect(result.out == data[i], "object \(i)")
            if readers == 0 { #expect(result.whole == nil, "object \(i): nothing was read ahead") }
            if readers == 1 { #expect(result.whole == data[i], "object \(i) read ahead whole") }
        }
        #expect(started.withLock { $0 } == 8, "eight readers asked for")
    }

    /// Sources of `sizes` bytes; reading the one at `fromStorage`, if any,
    /// adds 8 to `counter`, as the kernel's count of blocks read from
    /// storage grows when a source is not in the page cache.
    static func sources(_ sizes: [Int], fromStorage: Int? = nil, counter: BlockCount) throws -> [PutBatchItem] {
        try sizes.enumerated().map { i, size in
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ i) }
            let give = giving(data)
            return PutBatchItem(path: try StorePath("/p\(i)"), expectedLength: UInt64(size)) { buffer in
                if i == fromStorage { counter.add(8) }
                return try give(buffer)
            }
        }
    }

    /// Takes and releases every object of `window`, as a batch's writer
    /// does, and stops it.
    static func drain(_ window: ReadAheadWindow, _ count: Int) throws {
        defer { window.stop() }
        for i in 0..<count {
            _ = try window.take(i)
            window.release(i)
        }
    }

    /// The policy follows the last batch that read sources: readers at
    /// first; after a batch whose sources read nothing from storage, each
    /// writer reads its own (no reader is started); after one that read
    /// from storage, or whose reads the kernel did not count, readers
    /// again. A batch that read no source changes nothing.
    @Test func thePolicyFollowsWhatTheLastBatchReadFromStorage() throws {
        let counter = BlockCount()
        let blocks: @Sendable () -> Int? = { counter.value }
        let started = Mutex(0)
        let start: (@escaping @Sendable () -> Void) -> Bool = { body in
            started.withLock { $0 += 1 }
            return DetachedThread.start(body)
        }
        let policy = ReadAheadPolicy()
        #expect(policy.sourcesWaitForStorage)

        // Read by readers, all from the page cache: writers next.
        try Self.drain(ReadAheadWindow(try Self.sources([10, 20, 30], counter: counter), enabled: true, policy: policy,
                                       startThread: start, blocksRead: blocks), 3)
        #expect(started.withLock { $0 } == 3)
        #expect(!policy.sourcesWaitForStorage)

        // Read by the writers, one source from storage: readers next.
        try Self.drain(ReadAheadWindow(try Self.sources([10, 20, 30], fromStorage: 1, counter: counter), enabled: true,
                                       policy: policy, startThread: start, blocksRead: blocks), 3)
        #expect(started.withLock { $0 } == 3, "no reader for a batch its writers read")
        #expect(policy.sourcesWaitForStorage)

        // Read by readers, from the page cache, then by the writers, and
        // every source still in order.
        try Self.drain(ReadAheadWindow(try Self.sources([5, 6], counter: counter), enabled: true, policy: policy,
                                       startThread: start, blocksRead: blocks), 2)
        #expect(started.withLock { $0 } == 5)
        #expect(!policy.sourcesWaitForStorage)

        // Nothing to read (no source small enough): nothing learned.
        try Self.drain(ReadAheadWindow(try Self.sources([100_000, 100_000], fromStorage: 0, counter: counter), enabled: true,
                                       policy: policy, startThread: start, blocksRead: blocks), 2)
        #expect(!policy.sourcesWaitForStorage)

        // The kernel does not say: readers, as where sources wait.
        try Self.drain(ReadAheadWindow(try Self.sources([10, 20], counter: counter), enabled: true, policy: policy,
                                       startThread: start, blocksRead: { nil }), 2)
        #expect(policy.sourcesWaitForStorage)
    }

    /// Sources that can be prepared are read by their writers, with no
    /// reader, whatever the policy says. Once a writer's read waits for
    /// storage, one thread prepares the sources after it (never one
    /// before it, or one its writer has begun to read, and each once), at
    /// most ``ReadAheadWindow/preparedAhead`` ahead of the writers. Where
    /// the last batch waited, it prepares from the first; where nothing
    /// waits, it never starts.
    @Test func sourcesAfterOneThatWaitedArePreparedAheadOfTheirWriters() throws {
        final class Ledger: @unchecked Sendable {
            let lock = NSLock()
            var prepared: [Int] = []
            var taken: Set<Int> = []
            var readStarted: Set<Int> = []
            var mostAhead = 0
            var misuse: [String] = []
        }
        let counter = BlockCount()
        let started = Mutex(0)
        func window(_ count: Int, policy: ReadAheadPolicy, fromStorage: Int?, ledger: Ledger) throws -> (ReadAheadWindow, [[UInt8]]) {
            let data = (0..<count).map { i in (0..<(100 + i * 37 % 900)).map { UInt8(truncatingIfNeeded: $0 &* 3 &+ i) } }
            let items = try data.enumerated().map { i, bytes in
                let give = Self.giving(bytes)
                return PutBatchItem(path: try StorePath("/p\(i)"), expectedLength: UInt64(bytes.count), source: { buffer in
                    ledger.lock.withLock { _ = ledger.readStarted.insert(i) }
                    if i == fromStorage { counter.add(8) }
                    return try give(buffer)
                }, prepare: {
                    ledger.lock.withLock {
                        if ledger.readStarted.contains(i) { ledger.misuse.append("\(i) prepared after its read began") }
                        if ledger.prepared.contains(i) { ledger.misuse.append("\(i) prepared twice") }
                        ledger.prepared.append(i)
                        let ahead = ledger.prepared.count - ledger.prepared.filter { ledger.taken.contains($0) }.count
                        ledger.mostAhead = max(ledger.mostAhead, ahead)
                    }
                })
            }
            let made = ReadAheadWindow(items, enabled: true, policy: policy, startThread: { body in
                started.withLock { $0 += 1 }
                return DetachedThread.start(body)
            }, blocksRead: { counter.value })
            return (made, data)
        }
        /// Takes every object in order, as a writer; before object `i` of
        /// `pauses`, waits (10 s at most) until `pauses[i]` sources are
        /// prepared, then 50 ms more for any beyond them.
        func drain(_ window: ReadAheadWindow, _ data: [[UInt8]], ledger: Ledger, pauses: [Int: Int] = [:]) throws {
            defer { window.stop() }
            for i in data.indices {
                if let expected = pauses[i] {
                    let deadline = Date().addingTimeInterval(10)
                    while ledger.lock.withLock({ ledger.prepared.count }) < expected, Date() < deadline {
                        Thread.sleep(forTimeInterval: 0.005)
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                ledger.lock.withLock { _ = ledger.taken.insert(i) }
                let taken = try window.take(i)
                #expect(taken.whole.map { Array($0) } == data[i], "object \(i)")
                window.release(i)
            }
        }

        // The last batch read nothing from storage; the read of source 10
        // waits for it.
        let policy = ReadAheadPolicy()
        policy.learn(sourcesWaitedForStorage: false)
        let ledger = Ledger()
        let (first, data) = try window(300, policy: policy, fromStorage: 10, ledger: ledger)
        // Paused before 11, the writer finds 64 prepared (11 to 74); 40
        // sources later, 24 are left, and the preparing thread, woken
        // when 32 were, has prepared 32 more at least (up to 64 ahead of
        // the writer as it was then: it waits for 32 to be left again).
        try drain(first, data, ledger: ledger, pauses: [11: 64, 11 + 40: 64 + 32])
        #expect(ledger.misuse.isEmpty, "\(ledger.misuse)")
        #expect(started.withLock { $0 } == 1, "one thread, to prepare; no reader")
        #expect(ledger.prepared.min() == 11, "prepared from the source after the one that waited")
        #expect(ledger.prepared == ledger.prepared.sorted())
        #expect(ledger.mostAhead == ReadAheadWindow.preparedAhead, "prepared as far ahead as allowed, and no further")
        #expect(ledger.prepared.count >= 64 + 32, "prepared on as the writer took them")
        #expect(policy.sourcesWaitForStorage)

        // The last batch waited: prepared from the first source.
        let again = Ledger()
        let (second, data2) = try window(40, policy: policy, fromStorage: nil, ledger: again)
        try drain(second, data2, ledger: again, pauses: [0: 40])
        #expect(again.misuse.isEmpty, "\(again.misuse)")
        #expect(started.withLock { $0 } == 2)
        #expect(again.prepared == Array(0..<40))
        #expect(!policy.sourcesWaitForStorage, "nothing waited in this batch")

        // Nothing waits: nothing is prepared, and no thread starts.
        let none = Ledger()
        let (third, data3) = try window(40, policy: policy, fromStorage: nil, ledger: none)
        try drain(third, data3, ledger: none)
        #expect(none.prepared.isEmpty)
        #expect(started.withLock { $0 } == 2)
    }

    /// A window stopped before its writers took anything (its batch failed
    /// first) prepares no more sources once stopped: the one being
    /// prepared ends, and no other is opened.
    @Test func aStoppedWindowPreparesNoMore() throws {
        let policy = ReadAheadPolicy()   // waited, as at first: prepared from the first source
        let entered = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let prepared = Mutex(0)
        let items = try (0..<40).map { i in
            PutBatchItem(path: try StorePath("/p\(i)"), expectedLength: 10, source: Self.giving([UInt8](repeating: 1, count: 10)),
                         prepare: {
                             let count = prepared.withLock { $0 += 1; return $0 }
                             if count == 1 {
                                 entered.signal()
                                 proceed.wait()
                             }
                         })
        }
        let window = ReadAheadWindow(items, enabled: true, policy: policy)
        #expect(entered.wait(timeout: .now() + 10) == .success, "the first source was never prepared")
        let stopped = DispatchSemaphore(value: 0)
        Thread {
            window.stop()
            stopped.signal()
        }.start()
        // stop() waits for the preparing thread, which is still inside
        // the first source's preparing.
        #expect(stopped.wait(timeout: .now() + 0.2) == .timedOut)
        proceed.signal()
        #expect(stopped.wait(timeout: .now() + 10) == .success)
        #expect(prepared.withLock { $0 } == 1)
    }

    /// A source that fails while its writer reads it gives that error from
    /// `take`, and the batch's other objects are still handed over whole.
    @Test func aWriterReadingItsOwnSourceReportsItsFailure() throws {
        struct Broken: Error {}
        let policy = ReadAheadPolicy()
        policy.learn(sourcesWaitedForStorage: false)
        let good = [UInt8](repeating: 9, count: 4000)
        let items = [
            PutBatchItem(path: try StorePath("/bad"), expectedLength: 100) { _ in throw Broken() },
            PutBatchItem(path: try StorePath("/good"), expectedLength: 4000, source: Self.giving(good)),
        ]
        let window = ReadAheadWindow(items, enabled: true, policy: policy, startThread: { _ in
            Issue.record("a reader started for sources left to their writers")
            return false
        }, blocksRead: { 0 })
        defer { window.stop() }
        #expect(throws: Broken.self) { try window.take(0) }
        window.release(0)
        #expect(try window.take(1).whole.map { Array($0) } == good)
        window.release(1)
    }
}

/// A count of blocks read from storage, which a test's sources raise.
final class BlockCount: Sendable {
    private let count = Atomic<Int>(0)
    var value: Int { count.load(ordering: .relaxed) }
    func add(_ blocks: Int) { count.add(blocks, ordering: .relaxed) }
}
