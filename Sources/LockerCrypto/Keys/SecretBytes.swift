internal import COpenSSL
#if canImport(Glibc)
internal import Glibc
#endif

/// Key material, held in memory that wipes itself.
///
/// Every key in Locker lives in a `SecretBytes`: class keys, file keys,
/// passcode-derived keys and shared secrets. The contract:
///
/// - The bytes are in libcrypto's secure heap (one arena per process,
///   locked into memory and excluded from core dumps), or, when that is
///   nearly full (a quarter stays for libcrypto), in pages of their own,
///   locked where the `RLIMIT_MEMLOCK` limit allows and excluded from core
///   dumps.
/// - `deinit` overwrites the whole allocation with `OPENSSL_cleanse`
///   (`CRYPTO_secure_clear_free` in the arena) before releasing it. A
///   block of a key's size (32 bytes) or less, wiped, may stay in the
///   arena among a few spares of the releasing thread, for that thread's
///   next secret of that size or less.
/// - `==` runs in time that depends only on the lengths (`CRYPTO_memcmp`).
/// - `description` never shows the bytes.
/// - The bytes are reachable only inside `withUnsafeBytes`; callers must not
///   let the pointer escape.
///
/// Instances are immutable after initialization and safe to share between
/// threads. The one exception is internal to this module: scratch space
/// written through ``withUnsafeMutableBytes(_:)`` and never shared, either
/// allocated by one function (the steps of a key wrap) or kept by one
/// thread for as long as it runs and wiped after each use (HMAC's padded
/// key).
public final class SecretBytes: @unchecked Sendable {
    private let storage: UnsafeMutableRawBufferPointer
    private let allocationSize: Int
    private let placement: Placement

    /// The number of secret bytes.
    public let count: Int

    /// Creates `count` bytes from the cryptographically secure generator.
    public convenience init(randomCount count: Int) throws {
        try self.init(count: count) { buffer throws in
            try SecureRandom.fill(buffer)
        }
    }

    /// `number` secrets of `count` random bytes each, drawn from the
    /// generator a kilobyte at a time rather than one call per secret (a
    /// call costs about a microsecond, mostly the same whatever it draws).
    /// The draws stay in wiping storage until they are copied out.
    public static func random(_ number: Int, count: Int) throws -> [SecretBytes] {
        precondition(number >= 0 && count > 0, "random secrets need a positive length")
        let perDraw = max(1, 1024 / count)
        var secrets: [SecretBytes] = []
        secrets.reserveCapacity(number)
        while secrets.count < number {
            let drawn = min(perDraw, number - secrets.count)
            let pool = try SecretBytes(randomCount: drawn * count)
            try pool.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) throws in
                for i in 0..<drawn {
                    secrets.append(try SecretBytes(count: count) { out throws in
                        out.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[(i * count)..<((i + 1) * count)]))
                    })
                }
            }
        }
        return secrets
    }

    /// Copies `bytes` into wiping storage, leaving no other copy behind.
    /// The caller remains responsible for wiping its own.
    public convenience init(copying bytes: some Sequence<UInt8>) {
        // The closures cannot throw, so neither can this initializer.
        if let count = bytes.withContiguousStorageIfAvailable({ $0.count }) {
            // Straight from the caller's storage: an intermediate array
            // (what `Array(slice)` makes) would be a copy of the secret
            // freed without a wipe.
            try! self.init(count: count) { (buffer: UnsafeMutableRawBufferPointer) throws in
                _ = bytes.withContiguousStorageIfAvailable { buffer.copyMemory(from: UnsafeRawBufferPointer($0)) }
            }
        } else {
            // A sequence with no storage of its own: this array is the
            // only copy made, and is wiped.
            var array = Array(bytes)
            defer { Self.wipe(&array) }
            try! self.init(count: array.count) { (buffer: UnsafeMutableRawBufferPointer) throws in
                buffer.copyBytes(from: array)
            }
        }
    }

    /// Allocates `count` bytes and lets `initializer` fill them. If the
    /// initializer throws, the storage is wiped and released.
    public init(
        count: Int,
        initializingWith initializer: (UnsafeMutableRawBufferPointer) throws -> Void
    ) throws {
        precondition(count >= 0, "SecretBytes count must not be negative")
        let (raw, size, placement) = try Self.allocate(count)
        let buffer = UnsafeMutableRawBufferPointer(start: raw, count: count)
        // Run the initializer before `self` is fully initialized: a class
        // initializer that throws after that point still runs `deinit`,
        // which would release the allocation a second time (double free).
        do {
            try initializer(buffer)
        } catch {
            Self.release(raw, size: size, placement: placement)
            throw error
        }
        self.placement = placement
        storage = buffer
        allocationSize = size
        self.count = count
    }

    deinit {
        Self.release(storage.baseAddress!, size: allocationSize, placement: placement)
    }

    /// Where a secret's bytes live.
    private enum Placement {
        /// libcrypto's secure heap: one arena, locked and excluded from
        /// core dumps when it is set up, so a secret costs no system call.
        case secureHeap
        /// Whole pages of its own, locked if the limit allows (`locked`)
        /// and excluded from core dumps: when the secure heap is full.
        case pages(locked: Bool)
    }

    /// Bytes of the secure heap, set up once per process. Enough for every
    /// secret a process holds at once in normal use (class keys, open
    /// objects' file keys, the keys of the objects in flight); beyond it,
    /// secrets get pages of their own.
    private static let secureHeapBytes = 256 << 10
    private static let secureHeapReady: Bool = {
        // 1: ready and locked; 2: ready, but mlock or madvise failed (as
        // a page secret's mlock may fail under a low RLIMIT_MEMLOCK).
        let rc = CRYPTO_secure_malloc_init(secureHeapBytes, 16)
        return rc == 1 || rc == 2
    }()

    /// Bytes of the arena left to libcrypto itself. Its random generators
    /// (one pair per thread, made on a thread's first use) and some key
    /// schedules are allocated there, and fail, rather than fall back, when
    /// the arena is full: with the arena filled by secrets, a new thread's
    /// first random bytes failed ("unable to create drbg").
    private static let reservedForLibcrypto = 64 << 10

    private static func allocate(_ count: Int) throws -> (UnsafeMutableRawPointer, Int, Placement) {
        if count <= SpareBlocks.blockSize, let raw = SpareBlocks.take() {
            return (raw, SpareBlocks.blockSize, .secureHeap)
        }
        // A key's size or less gets a whole spare-sized block, so that it
        // can go back to a thread's spares when it is released.
        let size = count <= SpareBlocks.blockSize ? SpareBlocks.blockSize : count
        // Threads racing past the check overshoot by a few secrets at most,
        // well inside the reserve.
        if secureHeapReady, CRYPTO_secure_used() + size + reservedForLibcrypto <= secureHeapBytes,
           let raw = CRYPTO_secure_zalloc(size, nil, 0) {
            // Full: libcrypto fell back to its ordinary heap. Not for us.
            if CRYPTO_secure_allocated(raw) == 1 { return (raw, size, .secureHeap) }
            CRYPTO_clear_free(raw, size, nil, 0)
        }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        // Whole pages, so that mlock and madvise cover exactly this secret
        // and nothing else shares its pages.
        let pages = max(page, (count + page - 1) / page * page)
        var raw: UnsafeMutableRawPointer?
        guard posix_memalign(&raw, page, pages) == 0, let raw else {
            throw CryptoError.internalFailure
        }
        memset(raw, 0, pages)
        let isLocked = mlock(raw, pages) == 0
        _ = madvise(raw, pages, MADV_DONTDUMP)
        return (raw, pages, .pages(locked: isLocked))
    }

    private static func release(_ raw: UnsafeMutableRawPointer, size: Int, placement: Placement) {
        switch placement {
        case .secureHeap:
            if size == SpareBlocks.blockSize {
                OPENSSL_cleanse(raw, size)
                if SpareBlocks.keep(raw) { return }
            }
            // Cleanses, then returns the bytes to the arena.
            CRYPTO_secure_clear_free(raw, size, nil, 0)
        case .pages(let locked):
            OPENSSL_cleanse(raw, size)
            _ = madvise(raw, size, MADV_DODUMP)
            if locked { _ = munlock(raw, size) }
            free(raw)
        }
    }

    /// Calls `body` with the secret bytes. The pointer is valid only for the
    /// duration of the call.
    public func withUnsafeBytes<R, E: Error>(
        _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// Calls `body` with the bytes, writable. Only for scratch space this
    /// module allocated and holds alone: everywhere else an instance is
    /// immutable, and may be shared between threads.
    func withUnsafeMutableBytes<R, E: Error>(
        _ body: (UnsafeMutableRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        try body(storage)
    }
}

/// Each thread's few spare blocks of the secure heap, of a key's size,
/// wiped. A secret allocated from the arena and released again took its
/// lock three times (a read lock to see how full it is, the write lock to
/// allocate and again to free): a small object's five secrets, on both
/// cores at once, made that lock contended, and a `put -r` of 20,000 small
/// files made 100,000 such allocations. A spare is taken and given back
/// on its thread without a lock. Spares are still in the arena (locked,
/// out of core dumps), are wiped before they are kept, and are returned
/// to the arena when their thread ends.
private enum SpareBlocks {
    /// The size of a spare: a 256-bit key.
    static let blockSize = 32
    /// Spares a thread keeps at most.
    static let capacity = 16

    /// One thread's spares: `count` blocks at the start of `blocks`.
    private struct List {
        var count = 0
        let blocks = UnsafeMutablePointer<UnsafeMutableRawPointer>.allocate(capacity: capacity)
    }

    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        // As the thread ends: its spares go back to the arena.
        let made = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            let list = pointer.assumingMemoryBound(to: List.self)
            for i in 0..<list.pointee.count { CRYPTO_secure_clear_free(list.pointee.blocks[i], blockSize, nil, 0) }
            list.pointee.blocks.deallocate()
            list.deinitialize(count: 1)
            list.deallocate()
        }
        return made == 0 ? key : nil
    }()

    /// This thread's list, made on first use; nil without a thread key.
    private static func list() -> UnsafeMutablePointer<List>? {
        guard let key else { return nil }
        if let stored = pthread_getspecific(key) { return stored.assumingMemoryBound(to: List.self) }
        let list = UnsafeMutablePointer<List>.allocate(capacity: 1)
        list.initialize(to: List())
        guard pthread_setspecific(key, list) == 0 else {
            list.pointee.blocks.deallocate()
            list.deinitialize(count: 1)
            list.deallocate()
            return nil
        }
        return list
    }

    /// A wiped spare of this thread's, or nil if it has none.
    static func take() -> UnsafeMutableRawPointer? {
        guard let key, let stored = pthread_getspecific(key) else { return nil }
        let list = stored.assumingMemoryBound(to: List.self)
        guard list.pointee.count > 0 else { return nil }
        list.pointee.count -= 1
        return list.pointee.blocks[list.pointee.count]
    }

    /// Keeps `block`, a wiped block of the arena of `blockSize` bytes, as
    /// this thread's spare; false if the thread keeps enough already.
    static func keep(_ block: UnsafeMutableRawPointer) -> Bool {
        guard let list = list(), list.pointee.count < capacity else { return false }
        list.pointee.blocks[list.pointee.count] = block
        list.pointee.count += 1
        return true
    }
}

extension SecretBytes {
    /// Overwrites a transient copy of secret bytes (a buffer on its way to
    /// or from a file or a socket) with `OPENSSL_cleanse`, which the
    /// compiler cannot drop. Call it only on a uniquely referenced array,
    /// or the write goes to a copy.
    public static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { raw in
            if let base = raw.baseAddress { OPENSSL_cleanse(base, raw.count) }
        }
    }
}

extension SecretBytes: Equatable {
    /// Constant-time comparison. Unequal lengths compare unequal; the time
    /// taken depends on the lengths only.
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.count == 0 { return true }
        return lhs.withUnsafeBytes { a in
            rhs.withUnsafeBytes { b in
                CRYPTO_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
            }
        }
    }
}

extension SecretBytes: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { "SecretBytes(\(count) bytes, redacted)" }
    public var debugDescription: String { description }
}

/// Constant-time equality of two byte buffers of public length, for tags
/// and MACs that are not themselves secret but must not leak where they
/// differ.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    a.withUnsafeBytes { x in
        b.withUnsafeBytes { y in
            guard x.count == y.count else { return false }
            if x.count == 0 { return true }
            return CRYPTO_memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0
        }
    }
}
