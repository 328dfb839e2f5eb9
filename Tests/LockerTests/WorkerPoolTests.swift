import Foundation
@testable import LockerStore
import LockerIO
import Synchronization
import Testing

@Suite("Worker pool")
struct WorkerPoolTests {
    struct Failure: Error, Equatable { let index: Int }

    /// Runs `count` indices with `width` on `pool` and returns how many
    /// times each ran.
    private func runCounts(_ count: Int, width: Int, pool: WorkerPool) throws -> [Int] {
        let counts = Mutex([Int](repeating: 0, count: count))
        try parallelFor(count, width: width, pool: pool) { i in
            counts.withLock { $0[i] += 1 }
        }
        return counts.withLock { $0 }
    }

    /// Round after round, every index runs exactly once, and the helpers
    /// are the same threads: three started for the first round of width
    /// 4, none after.
    @Test func roundsReuseTheirThreads() throws {
        let pool = WorkerPool(maxThreads: 8, idleLifetime: 600)
        for count in [300, 7, 1000, 4, 300] + Array(repeating: 64, count: 45) {
            #expect(try runCounts(count, width: 4, pool: pool) == Array(repeating: 1, count: count))
        }
        #expect(pool.threadCounts.started == 3)
        #expect(pool.threadCounts.alive == 3)
    }

    /// Work is spread: with helpers that wait, a round of 8 tasks of
    /// 50 ms on width 8 takes far less than the 400 ms one thread needs.
    @Test func helpersShareTheWork() throws {
        let pool = WorkerPool(maxThreads: 8, idleLifetime: 600)
        let threads = Mutex<Set<String>>([])
        try parallelFor(8, width: 8, pool: pool) { _ in
            threads.withLock { _ = $0.insert("\(pthread_self())") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(threads.withLock { $0.count } > 1)
    }

    /// A failure is reported as the lowest failing index's error, and the
    /// other indices still run.
    @Test func theLowestFailingIndexIsRethrown() throws {
        let pool = WorkerPool(maxThreads: 8, idleLifetime: 600)
        let ran = Atomic<Int>(0)
        #expect(throws: Failure(index: 5)) {
            try parallelFor(300, width: 4, pool: pool) { i in
                ran.wrappingAdd(1, ordering: .relaxed)
                if [200, 17, 5].contains(i) { throw Failure(index: i) }
            }
        }
        #expect(ran.load(ordering: .relaxed) == 300)
    }

    /// A round started from inside another on a pool too small for both
    /// finishes: a caller never waits for a helper that has not started.
    @Test(.timeLimit(.minutes(1))) func aRoundInsideARoundFinishes() throws {
        let pool = WorkerPool(maxThreads: 1, idleLifetime: 600)
        let total = Atomic<Int>(0)
        try parallelFor(8, width: 4, pool: pool) { _ in
            try parallelFor(50, width: 4, pool: pool) { i in
                total.wrappingAdd(i, ordering: .relaxed)
            }
        }
        #expect(total.load(ordering: .relaxed) == 8 * (0..<50).reduce(0, +))
        #expect(pool.threadCounts.started == 1)
    }

    /// Rounds run from several threads at once on one small pool each
    /// run every index once.
    @Test(.timeLimit(.minutes(1))) func roundsAtOnceFromSeveralThreads() throws {
        let pool = WorkerPool(maxThreads: 2, idleLifetime: 600)
        let wrong = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for count in 1...40 {
                let counts = (try? runCounts(count, width: 3, pool: pool)) ?? []
                if counts != Array(repeating: 1, count: count) { wrong.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
        #expect(pool.threadCounts.started <= 2)
    }

    /// A thread left without work ends after the idle lifetime.
    @Test(.timeLimit(.minutes(1))) func idleThreadsEnd() throws {
        let pool = WorkerPool(maxThreads: 4, idleLifetime: 0.1)
        #expect(try runCounts(100, width: 3, pool: pool) == Array(repeating: 1, count: 100))
        #expect(pool.threadCounts.started == 2)
        var waited = 0.0
        while pool.threadCounts.alive > 0 && waited < 30 {
            Thread.sleep(forTimeInterval: 0.05)
            waited += 0.05
        }
        #expect(pool.threadCounts.alive == 0)
        // And the pool starts threads again afterwards.
        #expect(try runCounts(100, width: 3, pool: pool) == Array(repeating: 1, count: 100))
        #expect(pool.threadCounts.started == 4)
    }

    /// Where no thread can be started (the process's thread limit), a
    /// round is run by its caller alone and still runs every index once;
    /// the threads that failed are not counted, so a later round, once
    /// threads can be started again, starts them.
    @Test(.timeLimit(.minutes(1))) func withoutThreadsTheCallerDoesTheWork() throws {
        let allowed = Mutex(false)
        let pool = WorkerPool(maxThreads: 8, idleLifetime: 600) { body in
            guard allowed.withLock({ $0 }) else { return false }
            return DetachedThread.start(stackSize: 1 << 20, body)
        }
        let caller = "\(pthread_self())"
        let threads = Mutex<Set<String>>([])
        let counts = Mutex([Int](repeating: 0, count: 200))
        try parallelFor(200, width: 4, pool: pool) { i in
            threads.withLock { _ = $0.insert("\(pthread_self())") }
            counts.withLock { $0[i] += 1 }
        }
        #expect(counts.withLock { $0 } == Array(repeating: 1, count: 200))
        #expect(threads.withLock { $0 } == [caller])
        #expect(pool.threadCounts.alive == 0 && pool.threadCounts.started == 0)

        allowed.withLock { $0 = true }
        #expect(try runCounts(300, width: 4, pool: pool) == Array(repeating: 1, count: 300))
        #expect(pool.threadCounts.started == 3)
    }
}
