internal import Dispatch
internal import Glibc
internal import LockerCrypto
internal import LockerFormat
internal import LockerIO
internal import FoundationEssentials

/// Runs `body` for 0..<count on all cores and rethrows the first error.
func parallelFor(_ count: Int, _ body: (Int) throws -> Void) throws {
    if count == 1 {
        try body(0)
        return
    }
    try withErrorSlots(count) { errors in
        // Each iteration writes only its own slot, and everything `body`
        // touches is owned by the caller for the duration of this call.
        withoutActuallyEscaping(body) { escapable in
            let shared = Unchecked((escapable, errors))
            DispatchQueue.concurrentPerform(iterations: count) { i in
                let (run, slots) = shared.value
                do { try run(i) } catch { slots[i] = error }
            }
        }
    }
}

/// Gives `body` one error slot per index, for threads that each write only
/// their own, then rethrows the error of the lowest index that failed.
private func withErrorSlots(_ count: Int, _ body: (UnsafeMutableBufferPointer<(any Error)?>) -> Void) throws {
    let errors = UnsafeMutableBufferPointer<(any Error)?>.allocate(capacity: count)
    errors.initialize(repeating: nil)
    defer { errors.deinitialize().deallocate() }
    body(errors)
    if let error = errors.lazy.compactMap({ $0 }).first { throw error }
}

/// Runs `body` for 0..<count on up to `width` threads (the caller's
/// among them, the others from `pool`) and rethrows the first error. For
/// work that waits on the disk or in the kernel as much as it computes
/// (small objects: a file opened, read or created for each), where one
/// thread per core leaves cores idle.
func parallelFor(_ count: Int, width: Int, pool: WorkerPool = .shared, _ body: (Int) throws -> Void) throws {
    let width = min(width, count)
    if width <= 1 {
        for i in 0..<count { try body(i) }
        return
    }
    let next = IndexCounter()
    try withErrorSlots(count) { errors in
        // As in parallelFor(_:_:): each index writes only its own slot, and
        // every thread is done with `body` before this returns. A pool
        // thread may release its closure later, so the threads hold `body`
        // through a box that is emptied before `body` stops being valid.
        withoutActuallyEscaping(body) { escapable in
            let box = Unchecked(BodyBox(escapable))
            let slots = Unchecked(errors)
            pool.run(helpers: width - 1) {
                guard let run = box.value.run else { return }
                while let i = next.take(below: count) {
                    do { try run(i) } catch { slots.value[i] = error }
                }
            }
            box.value.run = nil
        }
    }
}

/// A closure that can be let go of before the last reference to its box.
final class BodyBox {
    var run: ((Int) throws -> Void)?
    init(_ run: @escaping (Int) throws -> Void) { self.run = run }
}

/// Hands out 0, 1, 2, … to several threads.
final class IndexCounter: @unchecked Sendable {
    private let lock = Lock()
    private var value = 0

    func take(below limit: Int) -> Int? {
        lock.withLock {
            guard value < limit else { return nil }
            defer { value += 1 }
            return value
        }
    }

    /// Hands out nothing more.
    func stop() {
        lock.withLock { value = .max }
    }
}

/// Carries a value into a concurrent closure whose safety the caller
/// guarantees.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// Plaintext buffers kept between objects, so that storing or fetching
/// many small objects does not allocate, lock and release megabytes for
/// each. A buffer comes back wiped as far as it was used; buffers beyond
/// the pool's bound are released (and wiped) as usual.
final class BufferPool: @unchecked Sendable {
    static let shared = BufferPool()
    /// Enough for one writer and one reader at the largest chunk size.
    private static let maxBytes = 24 << 20
    private let lock = Lock()
    private var free: [Int: [SensitiveBuffer]] = [:]
    private var bytes = 0

    func take(_ count: Int) -> SensitiveBuffer {
        let reused = lock.withLock { () -> SensitiveBuffer? in
            guard let buffer = free[count]?.popLast() else { return nil }
            bytes -= count
            return buffer
        }
        return reused ?? SensitiveBuffer(count: count)
    }

    /// Returns `buffer`, of which the first `used` bytes may hold
    /// plaintext.
    func give(_ buffer: SensitiveBuffer, used: Int) {
        buffer.wipe(upTo: used)
        let count = buffer.bytes.count
        lock.withLock {
            guard bytes + count <= Self.maxBytes else { return }
            free[count, default: []].append(buffer)
            bytes += count
        }
    }
}

/// Writes an object's data file: reads the source in batches of chunks,
/// compresses and seals the chunks of a batch on all cores, and writes the
/// previous batch while the next one is sealed. Memory is bounded by two
/// batches, whatever the object's size.
final class ObjectWriter {
    struct Result {
        var plaintextLength: UInt64
        var dataLength: UInt64
    }

    private let chunkSize: Int
    /// Past this many chunks the write fails (``StoreError/objectTooLarge(maxLength:)``).
    private let maxChunkCount: UInt64
    private let batch: Int
    private let chunkKey: SecretBytes
    /// One per chunk of a batch, made when a batch first needs it: a small
    /// object, one chunk, sets up one cipher, not a batch's worth.
    private var sealers: [ChunkSealer] = []
    private let input: SensitiveBuffer
    private let records: [[SensitiveBuffer]]
    private var lengths: [UInt32] = []
    /// How far each buffer was used, for the wipe on return to the pool.
    private var inputUsed = 0
    private var recordUsed: [[Int]]

    init(chunkKey: SecretBytes, chunkSize: UInt32, maxChunkCount: UInt64, workers: Int) throws {
        self.chunkSize = Int(chunkSize)
        self.maxChunkCount = min(maxChunkCount, ChunkLayout.maxChunkCount)
        let batch = max(2, workers * 2)
        self.batch = batch
        self.chunkKey = chunkKey
        input = BufferPool.shared.take(batch * Int(chunkSize))
        let recordLength = ChunkLayout.maxRecordLength(chunkSize: chunkSize)
        records = (0..<2).map { _ in (0..<batch).map { _ in BufferPool.shared.take(recordLength) } }
        recordUsed = Array(repeating: Array(repeating: 0, count: batch), count: 2)
    }

    deinit {
        BufferPool.shared.give(input, used: inputUsed)
        for set in 0..<2 {
            for i in 0..<batch { BufferPool.shared.give(records[set][i], used: recordUsed[set][i]) }
        }
    }

    /// Streams `source` (which returns how many bytes it put in the buffer,
    /// 0 at the end) into `file`.
    /// With `sync` false the file is not fsynced: the caller makes it
    /// durable (a batch, with one sync of the file system).
    func write(from source: (UnsafeMutableRawBufferPointer) throws -> Int, to file: DataFile,
               progress: ((UInt64) -> Void)?, sync: Bool = true) throws -> Result {
        try write(from: source, inlineLimit: 0, file: { file }, progress: progress, sync: sync).result
    }

    /// Streams `source` as ``write(from:to:progress:sync:)`` does, but
    /// keeps the data in memory, and creates no file, when the whole
    /// object's data takes at most `inlineLimit` bytes; otherwise it calls
    /// `makeFile` once, before the first write, and returns that file too.
    /// `recheck`, if given, is passed before each batch is sealed: a write
    /// that outlasts its class key stops there.
    func write(from source: (UnsafeMutableRawBufferPointer) throws -> Int, inlineLimit: Int,
               file makeFile: () throws -> DataFile, progress: ((UInt64) -> Void)?,
               sync: Bool = true, recheck: KeyRecheck? = nil) throws -> (result: Result, inlineData: [UInt8]?, file: DataFile?) {
        var created: DataFile?
        func file() throws -> DataFile {
            if let created { return created }
            let file = try makeFile()
            created = file
            return file
        }
        var total: UInt64 = 0
        var dataLength: UInt64 = 0
        var chunkIndex: UInt64 = 0
        var carry: UInt8?
        var finished = false
        var set = 0
        // Created only for an object of more than one batch.
        var writes: DispatchQueue?
        // One group per record set: sealing into a set waits only for the
        // write that last used it, so batch k+1 is sealed while batch k is
        // written.
        let pending = [DispatchGroup(), DispatchGroup()]
        var writeState: WriteState?
        // Once the writes are done: the queue may release its last job,
        // and the state with it, only after this returns.
        defer { writeState?.close() }
        // On every exit, a thrown error included: no queued write may
        // outlive the buffers it reads.
        defer { pending.forEach { $0.wait() } }
        // Sealed early when every record is still in memory at the end,
        // to see whether the object fits inline.
        var sealedIndex: [UInt8]?
        // The records of the batches before this one, while they would
        // still fit inline: an object whose plaintext takes several batches
        // may compress to a few kilobytes, and the format stores it inline
        // (no data file) whatever its plaintext length. Ciphertext only.
        var held: [UInt8] = []
        let recordLengths = UnsafeMutableBufferPointer<Int>.allocate(capacity: batch)
        recordLengths.initialize(repeating: 0)
        defer { recordLengths.deallocate() }

        while !finished {
            // Fill the batch; a carried byte is the one read to learn that
            // the previous batch was not the end.
            var filled = 0
            if let byte = carry {
                input.bytes[0] = byte
                filled = 1
                carry = nil
            }
            while filled < input.bytes.count {
                let n = try source(UnsafeMutableRawBufferPointer(rebasing: input.bytes[filled...]))
                if n == 0 { break }
                filled += n
            }
            inputUsed = max(inputUsed, filled)
            var atEnd = filled < input.bytes.count
            if !atEnd {
                var probe: UInt8 = 0
                let n = try withUnsafeMutableBytes(of: &probe) { try source($0) }
                if n == 0 { atEnd = true } else { carry = probe }
            }
            let chunksHere = max(filled == 0 && chunkIndex == 0 ? 1 : 0, (filled + chunkSize - 1) / chunkSize)
            if chunksHere == 0 {
                // The source ended exactly at the previous batch boundary,
                // which was then written as not final: impossible, because
                // the probe byte would have found the end.
                preconditionFailure("empty batch after a non-final one")
            }
            // Refused before it is written: no reader would take more.
            guard chunkIndex + UInt64(chunksHere) <= maxChunkCount else {
                throw StoreError.objectTooLarge(maxLength: maxChunkCount * UInt64(chunkSize))
            }
            try recheck?.pass()
            // Wait until the write that last used this record set is done.
            pending[set].wait()
            if let error = writeState?.error { throw error }
            let targets = records[set]
            let base = chunkIndex
            while sealers.count < chunksHere { sealers.append(try ChunkSealer(chunkKey: chunkKey)) }
            let sealers = self.sealers
            try parallelFor(chunksHere) { i in
                let start = i * chunkSize
                let length = min(chunkSize, filled - start)
                let plain = UnsafeRawBufferPointer(rebasing: input.bytes[start..<(start + max(0, length))])
                let isFinal = atEnd && i == chunksHere - 1
                recordLengths[i] = try sealers[i].seal(plain, index: base + UInt64(i), isFinal: isFinal, into: targets[i].bytes)
            }
            for i in 0..<chunksHere {
                lengths.append(UInt32(recordLengths[i]))
                dataLength += UInt64(recordLengths[i])
                recordUsed[set][i] = max(recordUsed[set][i], recordLengths[i])
            }
            let job = WriteJob(records: (0..<chunksHere).map { UnsafeRawBufferPointer(rebasing: targets[$0].bytes[..<recordLengths[$0]]) })
            if atEnd && writeState == nil {
                // Every record is here (this batch's, and any held): nothing
                // to overlap with.
                let index = try sealers[0].sealIndex(lengths)
                sealedIndex = index
                if dataLength + UInt64(index.count) <= UInt64(inlineLimit) {
                    var data = held
                    data.reserveCapacity(Int(dataLength) + index.count)
                    for record in job.records { data.append(contentsOf: record) }
                    data.append(contentsOf: index)
                    progress?(total + UInt64(filled))
                    return (Result(plaintextLength: total + UInt64(filled), dataLength: UInt64(data.count)), data, nil)
                }
                // Past the page cache if the plaintext took more than one
                // batch, as below.
                let state = WriteState(file: try file(), direct: !held.isEmpty)
                writeState = state
                state.write(held)
                held = []
                state.write(job)
            } else if writeState == nil && dataLength <= UInt64(inlineLimit) {
                // Not the end, and all sealed so far would still fit inline.
                for record in job.records { held.append(contentsOf: record) }
            } else {
                // More than one batch: large enough to write past the
                // page cache.
                if writeState == nil {
                    let state = WriteState(file: try file(), direct: true)
                    writeState = state
                    // The held records first, on this thread: no write
                    // is queued yet.
                    state.write(held)
                    held = []
                }
                let state = writeState!
                let queue = writes ?? DispatchQueue(label: "locker.object-writer")
                writes = queue
                let group = pending[set]
                group.enter()
                queue.async {
                    defer { group.leave() }
                    state.write(job)
                }
            }
            set ^= 1
            chunkIndex += UInt64(chunksHere)
            total += UInt64(filled)
            progress?(total)
            finished = atEnd
        }
        pending.forEach { $0.wait() }
        if let error = writeState?.error { throw error }
        let file = try file()
        let index = try sealedIndex ?? sealers[0].sealIndex(lengths)
        if let writeState {
            writeState.finish(appending: index)
            if let error = writeState.error { throw error }
        } else {
            try index.withUnsafeBytes { try file.write($0) }
        }
        dataLength += UInt64(index.count)
        if sync { try file.sync() }
        return (Result(plaintextLength: total, dataLength: dataLength), nil, file)
    }
}

/// Where an object's data is read from: its data file, or the bytes
/// inline in its header file.
protocol ChunkSource {
    func size() throws -> UInt64
    /// Reads exactly `buffer.count` bytes at `offset`; a source that ends
    /// first throws ``IOError`` with ENODATA.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws
    /// Reads exactly `count` bytes at `offset` into `buffer` (page-aligned,
    /// with room for `count + DataFile.readSlack`) and returns where they
    /// are in it: a data file read past the page cache puts them after the
    /// start of their first page.
    func read(_ count: Int, at offset: UInt64, in buffer: UnsafeMutableRawBufferPointer) throws -> UnsafeMutableRawBufferPointer
}

extension ChunkSource {
    /// Through ``read(into:at:)``, at the buffer's start: what a source
    /// that cannot read past the page cache does.
    func read(_ count: Int, at offset: UInt64, in buffer: UnsafeMutableRawBufferPointer) throws -> UnsafeMutableRawBufferPointer {
        let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[..<count])
        try read(into: bytes, at: offset)
        return bytes
    }
}

extension DataFile: ChunkSource {}

/// An object's data held in memory (read with its header).
struct InlineChunks: ChunkSource {
    let bytes: [UInt8]

    func size() throws -> UInt64 { UInt64(bytes.count) }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws {
        guard offset <= UInt64(bytes.count), UInt64(buffer.count) <= UInt64(bytes.count) - offset else {
            throw IOError("read", path: "inline data", errno: ENODATA)
        }
        bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(offset)..<(Int(offset) + buffer.count)])) }
    }
}

/// Records of one batch, handed to the write queue. The buffers belong to
/// the writer, which does not touch them until the write is done.
struct WriteJob: @unchecked Sendable {
    let records: [UnsafeRawBufferPointer]
}

/// The data file as the write queue sees it, and the first write error.
///
/// A large object's records are gathered in a page-aligned buffer and
/// written a megabyte at a time past the page cache (``OutputFile``):
/// written through the page cache, every 4 KiB of a large put needed a
/// new page-cache page, which the data file's fsync then wrote out anyway.
final class WriteState: @unchecked Sendable {
    private let file: DataFile
    private let lock = Lock()
    private var firstError: (any Error)?
    // Used by one thread at a time (the write queue, then the caller once
    // the queue is drained).
    private let output: OutputFile?
    private var staging: SensitiveBuffer?
    private var staged = 0
    private var offset: UInt64 = 0

    /// The size of the writes past the page cache.
    static let stagingBytes = 1 << 20

    init(file: DataFile, direct: Bool = false) {
        self.file = file
        output = direct ? file.writingPastThePageCache() : nil
    }

    deinit { close() }

    /// Closes the direct writes' descriptor and gives the buffer back.
    /// Called once no write is under way.
    func close() {
        output?.close()
        if let staging { BufferPool.shared.give(staging, used: 0) }
        staging = nil
    }

    var error: (any Error)? { lock.withLock { firstError } }

    /// Writes the records of `job`.
    func write(_ job: WriteJob) {
        recordingError {
            for record in job.records { try append(record) }
        }
    }

    /// Writes records kept in memory until now, on the caller's thread
    /// (before any write is queued).
    func write(_ held: [UInt8]) {
        guard !held.isEmpty else { return }
        recordingError {
            try held.withUnsafeBytes { try append($0) }
        }
    }

    /// Writes `last` (the index) and everything still gathered: the data
    /// file is then whole.
    func finish(appending last: [UInt8]) {
        recordingError {
            try last.withUnsafeBytes { try append($0) }
            if let output { try flush(output) }
        }
    }

    private func recordingError(_ body: () throws -> Void) {
        guard error == nil else { return }
        do {
            try body()
        } catch {
            lock.withLock { firstError = firstError ?? error }
        }
    }

    private func append(_ bytes: UnsafeRawBufferPointer) throws {
        if let output { try gather(bytes, into: output) } else { try file.write(bytes) }
    }

    private func flush(_ output: OutputFile) throws {
        guard let staging, staged > 0 else { return }
        try output.write(UnsafeRawBufferPointer(rebasing: staging.bytes[..<staged]), at: offset)
        offset += UInt64(staged)
        staged = 0
    }

    private func gather(_ bytes: UnsafeRawBufferPointer, into output: OutputFile) throws {
        // Ciphertext only: the pool's wipe on return is not needed, and
        // the buffer is reused rather than new memory for every object.
        let buffer = staging ?? BufferPool.shared.take(Self.stagingBytes)
        staging = buffer
        var done = 0
        while done < bytes.count {
            let n = min(bytes.count - done, buffer.bytes.count - staged)
            UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[staged..<staged + n])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[done..<done + n]))
            staged += n
            done += n
            if staged == buffer.bytes.count { try flush(output) }
        }
    }
}

/// An error a reader's sink threw, kept apart from the reader's own: a
/// destination that fails must not be reported as damage to the object.
struct SinkFailure: Error {
    let underlying: any Error

    static func marking<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw SinkFailure(underlying: error) }
    }
}

/// Reads an object's data file: authenticates the index, then opens the
/// chunks a range needs, a batch at a time on all cores. Stops at the first
/// failure; nothing unauthenticated reaches the sink.
final class ObjectReader {
    private let header: ObjectHeader
    private let file: any ChunkSource
    private let openers: [ChunkOpener]
    private let batch: Int
    private let recheck: KeyRecheck?
    private var offsets: [UInt64] = []
    private var lengths: [UInt32] = []

    /// `recheck`, if given, is passed before each batch or run of chunks
    /// is opened: a read that outlasts its key stops there.
    init(header: ObjectHeader, fileKey: SecretBytes, file: any ChunkSource, workers: Int,
         recheck: KeyRecheck? = nil) throws {
        self.header = header
        self.file = file
        self.recheck = recheck
        let batch = max(2, workers * 2)
        self.batch = batch
        let chunkKey = try ChunkLayout.chunkKey(fileKey: fileKey)
        // No more than the object has chunks: a read never opens more at
        // once, and each opener schedules the key (a small object, one
        // chunk, took four).
        let openerCount = Int(min(UInt64(batch), max(1, header.chunkCount)))
        openers = try (0..<openerCount).map { _ in try ChunkOpener(chunkKey: chunkKey) }
        try loadIndex(using: openers[0])
    }

    private func loadIndex(using opener: ChunkOpener) throws {
        let count = header.chunkCount
        guard try file.size() == header.dataLength else { throw CryptoError.authenticationFailure }
        let indexLength = ChunkLayout.indexLength(chunkCount: count)
        guard indexLength <= header.dataLength, count <= ChunkLayout.maxChunkCount else { throw CryptoError.authenticationFailure }
        var sealed = [UInt8](repeating: 0, count: Int(indexLength))
        try sealed.withUnsafeMutableBytes { try file.read(into: $0, at: header.dataLength - indexLength) }
        lengths = try opener.openIndex(sealed, chunkCount: count)
        var offset: UInt64 = 0
        let chunkSize = UInt64(header.chunkSize)
        let overhead = UInt64(ChunkLayout.recordOverhead)
        offsets.reserveCapacity(lengths.count)
        for (i, length) in lengths.enumerated() {
            // Each record holds at most its chunk, stored as it is: the
            // last chunk is what is left of the plaintext (checked here,
            // not only when that record is opened, so a range read that
            // never reaches it refuses such an index too).
            let chunk = i == lengths.count - 1 ? header.plaintextLength - UInt64(i) * chunkSize : chunkSize
            guard UInt64(length) >= overhead, UInt64(length) <= chunk + overhead else {
                throw CryptoError.authenticationFailure
            }
            offsets.append(offset)
            offset += UInt64(length)
        }
        guard offset == header.dataLength - indexLength else { throw CryptoError.authenticationFailure }
    }

    /// Sends the plaintext bytes in `range` to `sink`, in order: a batch of
    /// chunks, opened on all cores, at a time (so a sink that writes to the
    /// disk past the page cache writes a megabyte at once).
    func read(_ range: Range<UInt64>, into sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        let chunkSize = UInt64(header.chunkSize)
        let count = header.chunkCount
        // An empty read still authenticates the empty object's one chunk.
        let first = range.isEmpty ? 0 : range.lowerBound / chunkSize
        let last = range.isEmpty ? (header.plaintextLength == 0 ? 0 : UInt64.max) : (range.upperBound - 1) / chunkSize
        guard last == UInt64.max || last < count else { throw StoreError.invalidPath("range past the end") }
        if last == UInt64.max { return }
        let maxRecord = ChunkLayout.maxRecordLength(chunkSize: header.chunkSize)
        let recordBuffer = BufferPool.shared.take(batch * maxRecord + DataFile.readSlack)
        // Every chunk but an object's last is whole, so a batch's chunks
        // lie back to back here.
        let plainBuffer = BufferPool.shared.take(batch * Int(chunkSize))
        var recordUsed = 0
        var plainUsed = 0
        defer {
            BufferPool.shared.give(recordBuffer, used: recordUsed)
            BufferPool.shared.give(plainBuffer, used: plainUsed)
        }
        var index = first
        while index <= last {
            try recheck?.pass()
            let n = Int(min(UInt64(batch), last - index + 1))
            // The records of a batch are contiguous: one read.
            let start = offsets[Int(index)]
            let end = offsets[Int(index) + n - 1] + UInt64(lengths[Int(index) + n - 1])
            recordUsed = max(recordUsed, Int(end - start) + DataFile.readSlack)
            let lastLength = ChunkLayout.chunkLength(index: index + UInt64(n - 1), plaintextLength: header.plaintextLength,
                                                     chunkSize: header.chunkSize)
            let batchLength = (n - 1) * Int(chunkSize) + lastLength
            plainUsed = max(plainUsed, batchLength)
            let span = try file.read(Int(end - start), at: start, in: recordBuffer.bytes)
            let batchStart = index
            try parallelFor(n) { i in
                let chunk = batchStart + UInt64(i)
                let from = Int(offsets[Int(chunk)] - start)
                let record = UnsafeMutableRawBufferPointer(rebasing: span[from..<(from + Int(lengths[Int(chunk)]))])
                let plainLength = ChunkLayout.chunkLength(index: chunk, plaintextLength: header.plaintextLength,
                                                          chunkSize: header.chunkSize)
                let at = i * Int(chunkSize)
                try openers[i].open(record, index: chunk, isFinal: chunk == count - 1,
                                    into: UnsafeMutableRawBufferPointer(rebasing: plainBuffer.bytes[at..<at + plainLength]))
            }
            let batchOffset = index * chunkSize
            let lo = max(range.lowerBound, batchOffset) - batchOffset
            let hi = min(range.upperBound, batchOffset + UInt64(batchLength)) - batchOffset
            if hi > lo {
                try SinkFailure.marking { try sink(UnsafeRawBufferPointer(rebasing: plainBuffer.bytes[Int(lo)..<Int(hi)])) }
            }
            index += UInt64(n)
        }
    }

    /// Sends the plaintext bytes in `range` to `sink`, a run of chunks at a
    /// time (up to ``runBytes`` of plaintext) with its offset from
    /// `range.lowerBound`, from `width` threads at once and in no
    /// particular order: each thread reads, opens and hands over one run
    /// at a time, so output that can be written at an offset is written
    /// from every core, in writes large enough for the disk. Each chunk is
    /// authenticated before its bytes reach the sink. On the first failure
    /// no further run is started and the error is thrown; runs already
    /// handed over may be any subset of the range, so the caller discards
    /// its output.
    func read(_ range: Range<UInt64>, width: Int, at sink: (UInt64, UnsafeRawBufferPointer) throws -> Void) throws {
        // An empty read still authenticates the empty object's one chunk.
        if range.isEmpty { return try read(range) { _ in } }
        let chunkSize = UInt64(header.chunkSize)
        let count = header.chunkCount
        let first = range.lowerBound / chunkSize
        let last = (range.upperBound - 1) / chunkSize
        guard last < count else { throw StoreError.invalidPath("range past the end") }
        let chunksPerRun = max(1, Self.runBytes / Int(chunkSize))
        let chunks = Int(last - first + 1)
        let runs = (chunks + chunksPerRun - 1) / chunksPerRun
        let width = max(1, min(width, openers.count, runs))
        let maxRecord = ChunkLayout.maxRecordLength(chunkSize: header.chunkSize)
        let next = IndexCounter()
        try parallelFor(width, width: width) { worker in
            let record = BufferPool.shared.take(maxRecord * chunksPerRun + DataFile.readSlack)
            let plain = BufferPool.shared.take(Int(chunkSize) * chunksPerRun)
            var recordUsed = 0
            var plainUsed = 0
            defer {
                BufferPool.shared.give(record, used: recordUsed)
                BufferPool.shared.give(plain, used: plainUsed)
            }
            while let run = next.take(below: runs) {
                let runFirst = first + UInt64(run * chunksPerRun)
                let runLast = min(last, runFirst + UInt64(chunksPerRun) - 1)
                let runStart = runFirst * chunkSize
                var runEnd = runStart
                do {
                    try recheck?.pass()
                    // The run's records are contiguous: one read.
                    let start = offsets[Int(runFirst)]
                    let end = offsets[Int(runLast)] + UInt64(lengths[Int(runLast)])
                    recordUsed = max(recordUsed, Int(end - start) + DataFile.readSlack)
                    let span = try file.read(Int(end - start), at: start, in: record.bytes)
                    // Every chunk but an object's last is whole, so the
                    // run's chunks lie back to back in `plain`.
                    for chunk in runFirst...runLast {
                        let from = Int(offsets[Int(chunk)] - start)
                        let sealed = UnsafeMutableRawBufferPointer(rebasing: span[from..<(from + Int(lengths[Int(chunk)]))])
                        let plainLength = ChunkLayout.chunkLength(index: chunk, plaintextLength: header.plaintextLength,
                                                                  chunkSize: header.chunkSize)
                        let at = Int(chunk * chunkSize - runStart)
                        plainUsed = max(plainUsed, at + plainLength)
                        try openers[worker].open(sealed, index: chunk, isFinal: chunk == count - 1,
                                                 into: UnsafeMutableRawBufferPointer(rebasing: plain.bytes[at..<at + plainLength]))
                        runEnd = chunk * chunkSize + UInt64(plainLength)
                    }
                    let lo = max(range.lowerBound, runStart) - runStart
                    let hi = min(range.upperBound, runEnd) - runStart
                    try SinkFailure.marking {
                        try sink(runStart + lo - range.lowerBound, UnsafeRawBufferPointer(rebasing: plain.bytes[Int(lo)..<Int(hi)]))
                    }
                } catch {
                    // The other threads start no further run.
                    next.stop()
                    throw error
                }
            }
        }
    }

    /// The plaintext one thread opens before handing it over, in
    /// ``read(_:width:at:)``: four chunks of the default size. A fetch
    /// writing past the page cache waits for the disk on each write:
    /// writes of one 256 KiB chunk from two threads made it slower than
    /// writing through the page cache where new pages are cheap (512 MiB
    /// object: 0.44 s against 0.39 s), runs of 1 MiB faster (0.30 s);
    /// 4 MiB gained nothing more and took 6 MiB more memory.
    static let runBytes = 1 << 20
}
