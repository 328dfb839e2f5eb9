import Foundation
@testable import Locker
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
        let source = try window.source(1)
        let n = try bytes.withUnsafeMutableBytes { try source($0) }
        #expect(Array(bytes[..<n]) == [1, 2, 3])
        window.release(1)
    }
}
