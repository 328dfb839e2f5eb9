internal import Dispatch
internal import Glibc
internal import LockerFormat
internal import LockerIO
internal import FoundationEssentials
internal import Synchronization

/// The small sources of a batch, read ahead of the objects being written
/// by readers of their own, in order, into one bounded window of memory;
/// or each read whole by its object's writer: where every source can be
/// prepared (``PutBatchItem/prepare``), or where the batches before found
/// them in the page cache (see ``ReadAheadPolicy``).
///
/// Sources read by their writers that can be prepared are prepared ahead
/// of the writers, once one of them was found waiting for storage (in
/// this batch, or the last), by one thread of the window's own: it opens
/// each and asks the kernel for its pages, at most ``preparedAhead``
/// sources ahead of the writers, so that the disk has many reads in
/// flight and the writers find their sources in the page cache. Once a
/// batch finds all of them there, the next starts no thread and has no
/// hand-off or window at all.
///
/// Files not in the page cache are read at the disk's pace, and several
/// reads in flight keep it busy (measured: 20,000 files of 1–16 KiB read
/// with a cold cache in 1.1 s by 2 readers, 0.55 s by 8), while the
/// writes that follow contend for directory locks beyond one thread per
/// core. A source is read ahead when its ``PutBatchItem/expectedLength``
/// is at most the inline limit; it gets that many bytes and one more, so
/// that one that grew is seen to have more (the rest is read as it is
/// written). The window holds plaintext: it is a ``SensitiveBuffer``,
/// out of core dumps, locked where the limit allows, wiped when freed; so
/// is the buffer a writer reads its own source into, from ``BufferPool``.
///
/// Each reader reserves a run of consecutive objects at a time and reads
/// them in order. Deadlock-free because space is reserved in index order,
/// a reader waits for space only when it holds no reservation, the writers
/// take objects in index order, and each object's space is released once
/// it is written: the oldest reservation always belongs to an object a
/// writer holds or will take next, and its reader reads it without
/// waiting for anything.
public final class ReadAheadWindow: @unchecked Sendable {
    /// Bytes of plaintext read ahead at most at any time.
    static let capacity = 1 << 20
    /// Readers per batch: several reads in flight.
    static let readers = 8
    /// Objects, and bytes, a reader reserves at once at most (at least
    /// one object, whatever its size): eight runs fill the window.
    static let maxRunLength = 8
    static let runBytes = capacity / readers
    /// Objects a reader reserves at once in this window: fewer than
    /// ``maxRunLength`` in a batch too small to give every reader a run of
    /// that many, so that all the readers still have reads in flight.
    private let runLength: Int

    private enum Slot {
        case ready(offset: Int, count: Int, ended: Bool)
        case failed(any Error)
    }

    /// Sources prepared and not yet taken by their writers, at most: each
    /// may hold a descriptor open.
    public static let preparedAhead = 64

    /// Who reads the sources.
    private enum Mode {
        /// Readers of the window's own, ahead of the writers.
        case readers
        /// Each object's writer, as it takes the object; sources that can
        /// be prepared are, ahead of the writers, once some waited for
        /// storage.
        case writers
        /// Nobody: each object is written from its source.
        case none
    }

    private let items: [PutBatchItem]
    /// Set by `init`.
    private var mode: Mode
    /// Told at ``stop()`` whether the sources read waited for storage.
    private let policy: ReadAheadPolicy?
    private let startThread: (@escaping @Sendable () -> Void) -> Bool
    /// The calling thread's count of blocks read from storage.
    private let blocksRead: @Sendable () -> Int?
    /// Whether any read of a source waited for storage, or could not tell.
    private let waitedForStorage = Atomic<Bool>(false)
    /// Whether any source was read, by a reader or a writer.
    private let readAny = Atomic<Bool>(false)
    /// With ``Mode/writers``: each object's buffer, and how much of it its
    /// source filled, from ``take(_:)`` until ``release(_:)``. Each
    /// element is touched by that object's writer only.
    private let held: UnsafeMutableBufferPointer<(buffer: SensitiveBuffer, used: Int)?>
    /// With ``Mode/writers``, for each object whose source can be
    /// prepared: who has it (``Claim``); else nil.
    private let claims: UnsafeMutablePointer<Atomic<UInt8>>?
    /// Whether the thread preparing sources was started.
    private let preparing = Atomic<Bool>(false)
    /// Sources prepared and not yet taken.
    private let ahead = Atomic<Int>(0)
    /// Whether the preparing thread waits for the writers to take some.
    private let preparerWaits = Atomic<Bool>(false)
    /// Set by ``stop()``: the preparing thread prepares no more. (What
    /// `stopped` says, read without taking the lock for every source.)
    private let stopping = Atomic<Bool>(false)
    /// The indices of the items read ahead, in order.
    private let order: [Int]
    private let window: SensitiveBuffer?
    /// Guards the reservations; readers wait on it for space.
    private let condition = Condition()
    private let done = DispatchGroup()
    /// Each read object's result, written by its reader before it
    /// signals `ready`, read by its writer after waiting on it.
    private let slots: UnsafeMutableBufferPointer<Slot?>
    /// For each object read ahead, signalled once its slot is written;
    /// nil for the others.
    private let ready: [DispatchSemaphore?]
    /// Whether the writer of each object has waited for its read, in
    /// ``take(_:)``. Each element is touched by that writer only.
    private let consumed: UnsafeMutableBufferPointer<Bool>
    // Guarded by `condition`:
    private var nextReservation = 0
    /// Live reservations, oldest first, and whether each was released.
    private var live: [(item: Int, offset: Int, length: Int, released: Bool)] = []
    private var liveBytes = 0
    private var liveStart = 0
    private var reservationOf: [Int: Int] = [:]
    /// Objects released before they were reserved: not to be read.
    private var abandoned: Set<Int> = []
    /// Where the next reservation starts.
    private var head = 0
    private var stopped = false
    /// Set by the first ``stop()``, under `condition`.
    private var joined = false

    /// Starts reading `items` ahead, unless `enabled` is false or fewer
    /// than two qualify; or, if `policy` says the sources are in the page
    /// cache, leaves each to its writer (``take(_:)``). `startThread`
    /// starts a reader and says whether it did (tests make it fail); if no
    /// reader starts, nothing is read ahead. `blocksRead` counts the
    /// calling thread's reads from storage (tests stand in for the
    /// kernel's count).
    init(_ items: [PutBatchItem], enabled: Bool, policy: ReadAheadPolicy? = nil,
         startThread: @escaping (@escaping @Sendable () -> Void) -> Bool = { DetachedThread.start($0) },
         blocksRead: @escaping @Sendable () -> Int? = { ThreadIO.blocksRead() }) {
        self.items = items
        self.policy = policy
        self.blocksRead = blocksRead
        var order: [Int] = []
        for (i, item) in items.enumerated() where Self.isReadAhead(item) { order.append(i) }
        if !enabled || order.count < 2 { order = [] }
        let preparable = !order.isEmpty && order.allSatisfy { items[$0].prepare != nil }
        mode = order.isEmpty ? .none : preparable || policy?.sourcesWaitForStorage == false ? .writers : .readers
        held = .allocate(capacity: mode == .writers ? items.count : 0)
        held.initialize(repeating: nil)
        if preparable {
            let claims = UnsafeMutablePointer<Atomic<UInt8>>.allocate(capacity: items.count)
            for i in 0..<items.count { (claims + i).initialize(to: Atomic(Claim.free.rawValue)) }
            self.claims = claims
        } else {
            claims = nil
        }
        // With the writers reading, no reader, window or reservation.
        if mode == .writers { order = [] }
        var ready = [DispatchSemaphore?](repeating: nil, count: items.count)
        for i in order { ready[i] = DispatchSemaphore(value: 0) }
        self.order = order
        runLength = max(1, min(Self.maxRunLength, order.count / Self.readers))
        self.ready = ready
        slots = .allocate(capacity: items.count)
        slots.initialize(repeating: nil)
        consumed = .allocate(capacity: items.count)
        consumed.initialize(repeating: false)
        window = order.isEmpty ? nil : SensitiveBuffer(count: Self.capacity)
        self.startThread = startThread
        if claims != nil, policy?.sourcesWaitForStorage == true { startPreparing(from: 0) }
        guard mode == .readers else { return }
        var started = 0
        for _ in 0..<min(Self.readers, order.count) {
            done.enter()
            // A reader that could not be created (the process's thread
            // limit) is one fewer: any reader reads every object.
            if startThread({ [self] in
                read()
                done.leave()
            }) {
                started += 1
            } else {
                done.leave()
            }
        }
        if started == 0 { mode = .none }
    }

    /// Whether `item`'s source is read ahead (or by its writer, in
    /// ``take(_:)``): its expected length is at most the inline limit.
    private static func isReadAhead(_ item: PutBatchItem) -> Bool {
        guard let length = item.expectedLength else { return false }
        return length <= UInt64(ObjectHeader.maxInlineDataLength)
    }

    /// The buffer a writer reads its object's source into: the most a
    /// source read ahead may give.
    static let ownBufferSize = ObjectHeader.maxInlineDataLength + 1

    /// The source to write object `i` from: what was read ahead, then the
    /// rest of its source, or its source itself; and, when the whole source
    /// was read ahead (it ended within what was read), those bytes, from
    /// which the object may be sealed where they are. They stay valid until
    /// ``release(_:)`` of `i`. Waits for the read; throws what reading ahead
    /// threw. Used by one thread, once per object.
    ///
    /// With the sources left to their writers, the calling writer reads
    /// object `i`'s source here, as a reader would have.
    func take(_ i: Int) throws -> (whole: UnsafeRawBufferPointer?, source: (UnsafeMutableRawBufferPointer) throws -> Int) {
        if mode == .writers, Self.isReadAhead(items[i]) {
            claim(i)
            return try readOwn(i)
        }
        guard mode == .readers, let ready = ready[i] else { return (nil, items[i].source) }
        ready.wait()
        consumed[i] = true
        switch slots[i]! {
        case .failed(let error):
            throw error
        case .ready(let start, let count, let ended):
            let bytes = UnsafeRawBufferPointer(rebasing: window!.bytes[start..<start + count])
            return (ended ? bytes : nil, Self.giving(bytes, ended: ended, then: items[i].source))
        }
    }

    /// ``take(_:)`` of an object its writer reads: the source read into a
    /// buffer of the pool, as a reader reads it into the window.
    private func readOwn(_ i: Int) throws -> (whole: UnsafeRawBufferPointer?, source: (UnsafeMutableRawBufferPointer) throws -> Int) {
        let capacity = Int(items[i].expectedLength!) + 1
        let buffer = BufferPool.shared.take(Self.ownBufferSize)
        let before = blocksRead()
        var filled = 0
        var ended = false
        do {
            while filled < capacity {
                let n = try items[i].source(UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[filled..<capacity]))
                if n == 0 { ended = true; break }
                filled += n
            }
        } catch {
            BufferPool.shared.give(buffer, used: filled)
            throw error
        }
        if noteRead(from: before, to: blocksRead()), claims != nil { startPreparing(from: i + 1) }
        held[i] = (buffer, filled)
        let bytes = UnsafeRawBufferPointer(rebasing: buffer.bytes[..<filled])
        return (ended ? bytes : nil, Self.giving(bytes, ended: ended, then: items[i].source))
    }

    /// A source that gives `bytes`, then, unless the source `ended`
    /// within them, the rest of `rest`.
    private static func giving(_ bytes: UnsafeRawBufferPointer, ended: Bool,
                               then rest: @escaping (UnsafeMutableRawBufferPointer) throws -> Int)
        -> (UnsafeMutableRawBufferPointer) throws -> Int {
        var offset = 0
        return { buffer in
            if offset < bytes.count {
                let n = min(buffer.count, bytes.count - offset)
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + n]))
                offset += n
                return n
            }
            return ended ? 0 : try rest(buffer)
        }
    }

    /// Notes sources read by this thread, with its count of blocks read
    /// from storage `before` and `after` them: any difference, or a count
    /// the kernel did not give, says that they waited for storage, and
    /// returns true.
    @discardableResult
    private func noteRead(from before: Int?, to after: Int?) -> Bool {
        readAny.store(true, ordering: .relaxed)
        guard before == nil || after == nil || before != after else { return false }
        waitedForStorage.store(true, ordering: .relaxed)
        return true
    }

    /// Gives back object `i`'s space, once it is written or has failed;
    /// the bytes are wiped. Nothing for an object not read ahead.
    func release(_ i: Int) {
        if mode == .writers {
            if let own = held[i] {
                held[i] = nil
                BufferPool.shared.give(own.buffer, used: own.used)
            }
            return
        }
        guard mode == .readers, let ready = ready[i] else { return }
        condition.lock()
        defer { condition.unlock() }
        if !consumed[i], reservationOf[i] != nil {
            // Given up (its writer failed first) after a reader reserved
            // it: the reader may still be writing into its space, which
            // must not be wiped or handed on before it is done. A reader
            // always reads what it reserved, so this wait ends.
            condition.unlock()
            ready.wait()
            condition.lock()
        }
        guard let k = reservationOf.removeValue(forKey: i) else {
            // Given up before it was read (its writer failed first): it
            // must not be read, or its space would never come back.
            abandoned.insert(i)
            return
        }
        live[k - liveStart].released = true
        let (_, offset, length, _) = live[k - liveStart]
        window!.wipe(offset..<offset + length)
        var popped = 0
        while popped < live.count, live[popped].released { popped += 1 }
        if popped > 0 {
            liveBytes -= live[..<popped].reduce(0) { $0 + $1.length }
            live.removeFirst(popped)
            liveStart += popped
            // Readers waiting for space are woken once a quarter of the
            // window is free, not on every release (a wake-up per object
            // cost more system time than the reads saved), or when none is
            // left in use, which a writer waiting for its object implies.
            // One reader at a time takes the next reservation, and wakes
            // the next when it has.
            if live.isEmpty || Self.capacity - liveBytes >= Self.capacity / 4 { condition.signal() }
        }
    }

    /// Stops the readers and waits for them: after this, the window is
    /// no longer written. A window not handed to a batch must be stopped;
    /// a batch stops the window it is given. Stopping again does nothing.
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
        done.wait()
        condition.lock()
        defer { condition.unlock() }
        guard !joined else { return }
        joined = true
        slots.deinitialize()
        slots.deallocate()
        consumed.deallocate()
        // Objects taken and never released (their batch ended first).
        for case let own? in held { BufferPool.shared.give(own.buffer, used: own.used) }
        held.deinitialize()
        held.deallocate()
        if let claims {
            claims.deinitialize(count: items.count)
            claims.deallocate()
        }
        if readAny.load(ordering: .relaxed) {
            policy?.learn(sourcesWaitedForStorage: waitedForStorage.load(ordering: .relaxed))
        }
    }

    /// Whether the window was started for `items` and not stopped: the
    /// same paths in the same order (it reads each source for the object
    /// at its index: the sources read are those it was started with).
    func isStarted(for items: [PutBatchItem]) -> Bool {
        guard condition.withLock({ !stopped }) else { return false }
        return self.items.count == items.count && zip(self.items, items).allSatisfy { $0.path == $1.path }
    }

    // MARK: Sources prepared ahead of their writers

    /// Who has an object's source, with ``Mode/writers``.
    private enum Claim: UInt8 {
        /// Nobody yet.
        case free
        /// The preparing thread, preparing it.
        case preparing
        /// Nobody; prepared.
        case prepared
        /// Its writer.
        case taken
    }

    /// Takes object `i`'s source for its writer: waits while it is being
    /// prepared, and counts it off the prepared ones if it was.
    private func claim(_ i: Int) {
        guard let claims else { return }
        var state = claims[i].compareExchange(expected: Claim.free.rawValue, desired: Claim.taken.rawValue,
                                              ordering: .acquiringAndReleasing).original
        guard state != Claim.free.rawValue else { return }
        // Preparing takes an open and a hint: moments, not worth a wait
        // that another thread must signal. The hint may wait for room in
        // the disk's queue, though: past a few turns, the writer sleeps
        // between looks rather than spin a core.
        var turns = 0
        while state == Claim.preparing.rawValue {
            if turns < 64 { sched_yield() } else { usleep(50) }
            turns += 1
            state = claims[i].load(ordering: .acquiring)
        }
        claims[i].store(Claim.taken.rawValue, ordering: .relaxed)
        // The preparing thread is woken once half its room is free, not
        // for every source taken.
        let left = ahead.subtract(1, ordering: .sequentiallyConsistent).newValue
        if left == Self.preparedAhead / 2, preparerWaits.load(ordering: .sequentiallyConsistent) {
            condition.withLock { condition.signal() }
        }
    }

    /// Starts the thread that prepares the sources from object `start` on,
    /// unless it was started already.
    private func startPreparing(from start: Int) {
        guard preparing.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        done.enter()
        // Without it, each writer waits for its own reads.
        if !startThread({ [self] in
            prepare(from: start)
            done.leave()
        }) {
            done.leave()
        }
    }

    private func prepare(from start: Int) {
        guard let claims else { return }
        let before = blocksRead()
        var preparedAny = false
        defer {
            // Pages asked for are read by this thread's requests: counted
            // here, not by the writers that find them.
            if preparedAny { noteRead(from: before, to: blocksRead()) }
        }
        for j in start..<items.count {
            // A batch that ended early (it failed before its writers took
            // these) needs none of them opened.
            if stopping.load(ordering: .relaxed) { return }
            guard let prepare = items[j].prepare, Self.isReadAhead(items[j]) else { continue }
            if ahead.load(ordering: .sequentiallyConsistent) >= Self.preparedAhead {
                let stop: Bool = condition.withLock {
                    preparerWaits.store(true, ordering: .sequentiallyConsistent)
                    while !stopped, ahead.load(ordering: .sequentiallyConsistent) >= Self.preparedAhead { condition.wait() }
                    preparerWaits.store(false, ordering: .sequentiallyConsistent)
                    return stopped
                }
                if stop { return }
            }
            guard claims[j].compareExchange(expected: Claim.free.rawValue, desired: Claim.preparing.rawValue,
                                            ordering: .acquiringAndReleasing).exchanged else { continue }
            prepare()
            preparedAny = true
            ahead.add(1, ordering: .sequentiallyConsistent)
            claims[j].store(Claim.prepared.rawValue, ordering: .releasing)
        }
    }

    // MARK: Readers

    private func read() {
        let before = blocksRead()
        var readSome = false
        defer { if readSome { noteRead(from: before, to: blocksRead()) } }
        while true {
            condition.lock()
            // A run of consecutive objects a time, not one: with sources
            // in the page cache a read takes microseconds, and a lock, a
            // wake-up of the next reader and a wait for each object cost
            // more than the read (a `put -r` of 20,000 small files made
            // 0.55 futex calls an object here, half of all its calls).
            // Several readers with a run each still keep as many reads
            // in flight for a cold cache.
            var run: [(item: Int, offset: Int, capacity: Int)] = []
            var runBytes = 0
            while !stopped, nextReservation < order.count, run.count < runLength {
                let item = order[nextReservation]
                if abandoned.contains(item) {
                    nextReservation += 1
                    continue
                }
                let capacity = Int(items[item].expectedLength!) + 1
                if !run.isEmpty, runBytes + capacity > Self.runBytes { break }
                guard let offset = reserve(item, capacity) else {
                    // Whatever this reader holds is read first: only a
                    // reader with nothing reserved waits for space.
                    if !run.isEmpty { break }
                    condition.wait()
                    continue
                }
                nextReservation += 1
                run.append((item, offset, capacity))
                runBytes += capacity
            }
            // The next run may fit too.
            if !run.isEmpty, nextReservation < order.count { condition.signal() }
            condition.unlock()
            if run.isEmpty { return }
            for (i, offset, capacity) in run {
                let region = UnsafeMutableRawBufferPointer(rebasing: window!.bytes[offset..<offset + capacity])
                let slot: Slot
                do {
                    var filled = 0
                    var ended = false
                    while filled < capacity {
                        let n = try items[i].source(UnsafeMutableRawBufferPointer(rebasing: region[filled...]))
                        if n == 0 { ended = true; break }
                        filled += n
                    }
                    slot = .ready(offset: offset, count: filled, ended: ended)
                } catch {
                    slot = .failed(error)
                }
                slots[i] = slot
                readSome = true
                ready[i]!.signal()
            }
        }
    }

    /// Reserves `size` bytes of the ring for `item`, or returns nil if
    /// they do not fit now. Called with `condition` held.
    private func reserve(_ item: Int, _ size: Int) -> Int? {
        let capacity = Self.capacity
        guard let oldest = live.first else {
            head = 0
            return record(item, at: 0, length: size)
        }
        let tail = oldest.offset
        if head > tail {
            // Live is [tail, head): the space after head, else from 0.
            if capacity - head >= size { return record(item, at: head, length: size) }
            if tail >= size {
                // The end of the ring stays unused until the reservations
                // before it are released.
                return record(item, at: 0, length: size)
            }
            return nil
        }
        // Live wraps: [tail, capacity) and [0, head).
        return tail - head >= size ? record(item, at: head, length: size) : nil
    }

    private func record(_ item: Int, at offset: Int, length: Int) -> Int {
        reservationOf[item] = liveStart + live.count
        live.append((item, offset, length, false))
        liveBytes += length
        head = offset + length
        return offset
    }
}

/// Whether a store's batches read their small sources with readers of
/// their own (``ReadAheadWindow``), or prepare them ahead of their
/// writers from the first, learned from the last batch read.
///
/// Readers pay where sources wait for the disk. Where the page cache holds
/// them, each read takes microseconds, and handing every object from a
/// reader to its writer costs more than the read: `put -r` of 20,000
/// small files in the page cache took 11% less time with each writer
/// reading its own sources (docs/performance.md, "After pass 34: sources
/// in the page cache read by their writers"). So a batch whose
/// sources read nothing from storage leaves the next batches' sources to
/// their writers, and one whose sources did, or whose reads the kernel
/// did not count, brings the readers back, or the preparing of sources
/// that can be prepared. Readers first: a store's first batch is read
/// ahead, or prepared.
final class ReadAheadPolicy: Sendable {
    private let waited = Atomic<Bool>(true)

    /// Whether the last batch's sources waited for storage: the next
    /// batch's are read by readers, or, where they can be prepared,
    /// prepared from the first.
    var sourcesWaitForStorage: Bool { waited.load(ordering: .relaxed) }

    /// Learns from a batch that read some sources.
    func learn(sourcesWaitedForStorage: Bool) {
        waited.store(sourcesWaitedForStorage, ordering: .relaxed)
    }
}
