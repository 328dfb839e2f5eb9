internal import COpenSSL
#if canImport(Glibc)
internal import Glibc
#endif

/// Key material, held in memory that wipes itself.
///
/// Every key in Locker lives in a `SecretBytes`: class keys, file keys,
/// passcode-derived keys and shared secrets. The contract:
///
/// - The bytes are in a private allocation that is locked into memory where
///   the `RLIMIT_MEMLOCK` limit allows and excluded from core dumps.
/// - `deinit` overwrites the whole allocation with `OPENSSL_cleanse` before
///   releasing it.
/// - `==` runs in time that depends only on the lengths (`CRYPTO_memcmp`).
/// - `description` never shows the bytes.
/// - The bytes are reachable only inside `withUnsafeBytes`; callers must not
///   let the pointer escape.
///
/// Instances are immutable after initialization and safe to share between
/// threads.
public final class SecretBytes: @unchecked Sendable {
    private let storage: UnsafeMutableRawBufferPointer
    private let allocationSize: Int
    private let locked: Bool

    /// The number of secret bytes.
    public let count: Int

    /// Creates `count` bytes from the cryptographically secure generator.
    public convenience init(randomCount count: Int) throws {
        try self.init(count: count) { buffer throws in
            try SecureRandom.fill(buffer)
        }
    }

    /// Copies `bytes` into wiping storage. The caller remains responsible for
    /// wiping its own copy.
    public convenience init(copying bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        // The closure cannot throw, so neither can this initializer.
        try! self.init(count: array.count) { (buffer: UnsafeMutableRawBufferPointer) throws in
            buffer.copyBytes(from: array)
        }
    }

    /// Allocates `count` bytes and lets `initializer` fill them. If the
    /// initializer throws, the storage is wiped and released.
    public init(
        count: Int,
        initializingWith initializer: (UnsafeMutableRawBufferPointer) throws -> Void
    ) throws {
        precondition(count >= 0, "SecretBytes count must not be negative")
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        // Whole pages, so that mlock and madvise cover exactly this secret
        // and nothing else shares its pages.
        let size = max(page, (count + page - 1) / page * page)
        var raw: UnsafeMutableRawPointer?
        guard posix_memalign(&raw, page, size) == 0, let raw else {
            throw CryptoError.internalFailure
        }
        memset(raw, 0, size)
        let isLocked = mlock(raw, size) == 0
        _ = madvise(raw, size, MADV_DONTDUMP)
        let buffer = UnsafeMutableRawBufferPointer(start: raw, count: count)
        // Run the initializer before `self` is fully initialized: a class
        // initializer that throws after that point still runs `deinit`,
        // which would release the allocation a second time (double free).
        do {
            try initializer(buffer)
        } catch {
            Self.release(raw, size: size, locked: isLocked)
            throw error
        }
        locked = isLocked
        storage = buffer
        allocationSize = size
        self.count = count
    }

    deinit {
        Self.release(storage.baseAddress!, size: allocationSize, locked: locked)
    }

    private static func release(_ raw: UnsafeMutableRawPointer, size: Int, locked: Bool) {
        OPENSSL_cleanse(raw, size)
        _ = madvise(raw, size, MADV_DODUMP)
        if locked { _ = munlock(raw, size) }
        free(raw)
    }

    /// The start of the storage, for libcrypto parameter lists that keep a
    /// pointer. Valid while `self` is alive.
    var unsafeBaseAddress: UnsafeMutableRawPointer { storage.baseAddress! }

    /// Calls `body` with the secret bytes. The pointer is valid only for the
    /// duration of the call.
    public func withUnsafeBytes<R, E: Error>(
        _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        try body(UnsafeRawBufferPointer(storage))
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
