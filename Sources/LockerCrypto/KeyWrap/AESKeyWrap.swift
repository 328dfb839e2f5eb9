internal import COpenSSL

/// AES key wrap: RFC 3394 (KW) and RFC 5649 (KWP, with padding).
///
/// KW is computed here over libcrypto's AES (see `keyWrap`); KWP, which
/// Locker does not use on any hot path, is libcrypto's.
///
/// The key-encryption key (KEK) may be 16, 24 or 32 bytes; Locker itself
/// only uses 32. Lengths are checked before libcrypto sees the input,
/// because libcrypto "unwraps" an empty input to an empty key.
public enum AESKeyWrap {
    /// The length of an RFC 3394 wrap of a 256-bit key.
    public static let wrappedKeyByteCount = 40

    /// Wraps `key` under `kek` (RFC 3394). `key` must be at least 16 bytes
    /// and a multiple of 8.
    public static func wrap(_ key: SecretBytes, kek: SecretBytes) throws -> [UInt8] {
        try wrap([key], kek: kek)[0]
    }

    /// Wraps each of `keys` under `kek` (RFC 3394): the same as
    /// ``wrap(_:kek:)`` of each in turn. The keys must all have one length,
    /// at least 16 bytes and a multiple of 8; none gives none.
    public static func wrap(_ keys: [SecretBytes], kek: SecretBytes) throws -> [[UInt8]] {
        guard let length = keys.first?.count else { return [] }
        guard length >= 16, length % 8 == 0, keys.allSatisfy({ $0.count == length }) else { throw CryptoError.invalidInputSize }
        return try keyWrap(encrypting: true, kek: kek, count: keys.count, blocks: length / 8, load: { k, r in
            keys[k].withUnsafeBytes { r.copyMemory(from: $0) }
        }, finish: { out in Array(out) })
    }

    /// Unwraps an RFC 3394 `wrapped` key. `wrapped` must be at least 24
    /// bytes and a multiple of 8; a failed integrity check is
    /// ``CryptoError/authenticationFailure``.
    public static func unwrap(_ wrapped: [UInt8], kek: SecretBytes) throws -> SecretBytes {
        try unwrap([wrapped], kek: kek)[0]
    }

    /// Unwraps each of `wrapped` under `kek` (RFC 3394): the same as
    /// ``unwrap(_:kek:)`` of each in turn, except that one failed integrity
    /// check fails them all, with ``CryptoError/authenticationFailure``
    /// whichever it was. They must all have one length, at least 24 bytes
    /// and a multiple of 8; none gives none.
    public static func unwrap(_ wrapped: [[UInt8]], kek: SecretBytes) throws -> [SecretBytes] {
        guard let length = wrapped.first?.count else { return [] }
        guard length >= 24, length % 8 == 0, wrapped.allSatisfy({ $0.count == length }) else { throw CryptoError.invalidInputSize }
        return try keyWrap(encrypting: false, kek: kek, count: wrapped.count, blocks: length / 8 - 1, load: { k, ar in
            wrapped[k].withUnsafeBytes { ar.copyMemory(from: $0) }
        }, finish: { out in SecretBytes(copyingPrefix: out.count, of: out) })
    }

    /// Wraps `key` under `kek` with padding (RFC 5649). `key` must not be
    /// empty.
    public static func wrapWithPadding(_ key: SecretBytes, kek: SecretBytes) throws -> [UInt8] {
        guard key.count >= 1 else { throw CryptoError.invalidInputSize }
        return try key.withUnsafeBytes { input throws in
            let capacity = (input.count + 7) / 8 * 8 + 8
            return try run(.kwp, encrypting: true, kek: kek, input: input, outputCapacity: capacity) { out, n in
                Array(UnsafeRawBufferPointer(rebasing: out[..<n]))
            }
        }
    }

    /// Unwraps an RFC 5649 `wrapped` key. `wrapped` must be at least 16
    /// bytes and a multiple of 8.
    public static func unwrapWithPadding(_ wrapped: [UInt8], kek: SecretBytes) throws -> SecretBytes {
        guard wrapped.count >= 16, wrapped.count % 8 == 0 else { throw CryptoError.invalidInputSize }
        return try wrapped.withUnsafeBytes { input throws in
            try run(.kwp, encrypting: false, kek: kek, input: input, outputCapacity: input.count) { out, n in
                SecretBytes(copyingPrefix: n, of: out)
            }
        }
    }

    private enum Mode { case ecb, kwp }

    private static func cipher(_ mode: Mode, kekSize: Int) throws -> OpaquePointer {
        let c: OpaquePointer? = switch (mode, kekSize) {
        case (.ecb, 16): EVP_aes_128_ecb()
        case (.ecb, 24): EVP_aes_192_ecb()
        // The size Locker uses, fetched once (see Fetched).
        case (.ecb, 32): Fetched.aes256ECB?.pointer
        case (.kwp, 16): EVP_aes_128_wrap_pad()
        case (.kwp, 24): EVP_aes_192_wrap_pad()
        case (.kwp, 32): Fetched.aes256WrapPad?.pointer
        default: nil
        }
        guard let c else { throw CryptoError.invalidKeySize }
        return c
    }

    /// The integrity check value of RFC 3394 (section 2.2.3.1).
    private static let initialValue = [UInt8](repeating: 0xA6, count: 8)

    /// RFC 3394 wraps or unwraps of `count` inputs under one key, the
    /// index-based steps of its section 2.2, each of `blocks` (n ≥ 2)
    /// 64-bit blocks of key. Each step is one call to AES-ECB over the
    /// block B of every input, so the key schedule and libcrypto's
    /// per-call cost are paid once a step, not once an input. `load(k,
    /// into)` copies input k into wiping scratch memory: the key (R, 8n
    /// bytes) when wrapping, the wrap (A | R, 8n + 8) when unwrapping.
    /// `finish(bytes)` gets each result in turn, in that memory: `A | R`
    /// when wrapping, `R` when unwrapping. A failed integrity check of any
    /// input fails them all with ``CryptoError/authenticationFailure``,
    /// whichever input and byte is wrong.
    //
    // Not libcrypto's own KW (`AES-256-WRAP`): that one runs AES through
    // `AES_encrypt`, without the processor's AES instructions, while its ECB
    // uses them. The agent wraps a key per object stored and unwraps one per
    // object read; its CPU for `put -r` of 20,000 small files went from 120
    // to 60 ms, and for `get -r` from 150 to 70 ms (docs/performance.md).
    // Running each step over a whole request's keys at once took the rest
    // of that cost off the path of every batch. The KW vectors (RFC 3394
    // and Wycheproof, valid and invalid) hold these steps to the standard,
    // one input at a time and many.
    private static func keyWrap<T>(
        encrypting: Bool, kek: SecretBytes, count: Int, blocks n: Int,
        load: (Int, UnsafeMutableRawBufferPointer) -> Void,
        finish: (UnsafeRawBufferPointer) -> T
    ) throws -> [T] {
        precondition(count >= 1 && n >= 2)
        let ecb = try cipher(.ecb, kekSize: kek.count)
        // Each input's A | R, one after another, then each input's B.
        let stride = 8 + 8 * n
        guard count <= (Int(Int32.max) - 16) / (stride + 16) else { throw CryptoError.invalidInputSize }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError.internalFailure }
        defer { EVP_CIPHER_CTX_free(context) }
        let initialized = kek.withUnsafeBytes { k in
            EVP_CipherInit_ex(context, ecb, nil, k.bindMemory(to: UInt8.self).baseAddress, nil, encrypting ? 1 : 0) == 1
        }
        guard initialized, EVP_CIPHER_CTX_set_padding(context, 0) == 1 else { throw CryptoError.internalFailure }
        // All in wiping memory: R and B hold the keys in the clear on both
        // ways.
        let scratch = try SecretBytes(count: stride * count + 16 * count) { _ throws in }
        return try scratch.withUnsafeMutableBytes { raw throws in
            let records = raw.bindMemory(to: UInt8.self).baseAddress!
            let blockBytes = records + stride * count
            /// Input k's A; its R[i] is at `a(k) + 8 + 8 * i`.
            func a(_ k: Int) -> UnsafeMutablePointer<UInt8> { records + stride * k }
            func b(_ k: Int) -> UnsafeMutablePointer<UInt8> { blockBytes + 16 * k }
            for k in 0..<count {
                if encrypting {
                    Self.initialValue.withUnsafeBufferPointer { a(k).update(from: $0.baseAddress!, count: 8) }
                    load(k, UnsafeMutableRawBufferPointer(start: a(k) + 8, count: 8 * n))
                } else {
                    load(k, UnsafeMutableRawBufferPointer(start: a(k), count: stride))
                }
            }
            /// Every B = AES(K, B) or AES⁻¹(K, B), in place.
            func blocksThroughAES() throws {
                var written: Int32 = 0
                guard EVP_CipherUpdate(context, blockBytes, &written, blockBytes, Int32(16 * count)) == 1,
                      written == Int32(16 * count)
                else {
                    throw CryptoError.internalFailure
                }
            }
            /// `x` XOR the step counter t, big-endian, into `into`.
            func xorCounter(_ x: UnsafeMutablePointer<UInt8>, _ t: Int, into: UnsafeMutablePointer<UInt8>) {
                for j in 0..<8 { into[j] = x[j] ^ UInt8(truncatingIfNeeded: UInt64(t) >> (56 - 8 * j)) }
            }
            if encrypting {
                for j in 0..<6 {
                    for i in 0..<n {
                        // B = AES(K, A | R[i]); A = MSB(B) ^ t; R[i] = LSB(B)
                        for k in 0..<count {
                            b(k).update(from: a(k), count: 8)
                            (b(k) + 8).update(from: a(k) + 8 + 8 * i, count: 8)
                        }
                        try blocksThroughAES()
                        for k in 0..<count {
                            xorCounter(b(k), n * j + i + 1, into: a(k))
                            (a(k) + 8 + 8 * i).update(from: b(k) + 8, count: 8)
                        }
                    }
                }
                return (0..<count).map { finish(UnsafeRawBufferPointer(start: a($0), count: stride)) }
            }
            for j in (0..<6).reversed() {
                for i in (0..<n).reversed() {
                    // B = AES⁻¹(K, (A ^ t) | R[i]); A = MSB(B); R[i] = LSB(B)
                    for k in 0..<count {
                        xorCounter(a(k), n * j + i + 1, into: b(k))
                        (b(k) + 8).update(from: a(k) + 8 + 8 * i, count: 8)
                    }
                    try blocksThroughAES()
                    for k in 0..<count {
                        a(k).update(from: b(k), count: 8)
                        (a(k) + 8 + 8 * i).update(from: b(k) + 8, count: 8)
                    }
                }
            }
            // In constant time, every input looked at, and one answer for
            // any wrong byte of any of them.
            var wrong: Int32 = 0
            Self.initialValue.withUnsafeBytes { iv in
                for k in 0..<count { wrong |= CRYPTO_memcmp(a(k), iv.baseAddress!, 8) }
            }
            guard wrong == 0 else { throw CryptoError.authenticationFailure }
            return (0..<count).map { finish(UnsafeRawBufferPointer(start: a($0) + 8, count: 8 * n)) }
        }
    }

    /// Runs one KWP wrap or unwrap. The output goes to a wiping scratch buffer,
    /// because on unwrap it is key material; `finish` copies out what the
    /// caller keeps.
    private static func run<R>(
        _ mode: Mode, encrypting: Bool, kek: SecretBytes, input: UnsafeRawBufferPointer, outputCapacity: Int,
        finish: (UnsafeRawBufferPointer, Int) -> R
    ) throws -> R {
        let evpCipher = try cipher(mode, kekSize: kek.count)
        guard input.count < Int(Int32.max) else { throw CryptoError.invalidInputSize }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError.internalFailure }
        defer { EVP_CIPHER_CTX_free(context) }
        EVP_CIPHER_CTX_set_flags(context, EVP_CIPHER_CTX_FLAG_WRAP_ALLOW)
        let initialized = kek.withUnsafeBytes { k in
            EVP_CipherInit_ex(context, evpCipher, nil, k.bindMemory(to: UInt8.self).baseAddress, nil, encrypting ? 1 : 0) == 1
        }
        guard initialized else { throw CryptoError.internalFailure }
        // Extra room: libcrypto's wrap may write a block past the result.
        let scratch = try SecretBytes(count: outputCapacity + 16) { _ throws in }
        return try scratch.withUnsafeMutableBytes { raw throws in
            let out = raw.bindMemory(to: UInt8.self).baseAddress!
            var written: Int32 = 0
            guard EVP_CipherUpdate(context, out, &written, input.bindMemory(to: UInt8.self).baseAddress, Int32(input.count)) == 1,
                  written > 0
            else {
                throw encrypting ? CryptoError.internalFailure : CryptoError.authenticationFailure
            }
            var tail: Int32 = 0
            guard EVP_CipherFinal_ex(context, out + Int(written), &tail) == 1 else {
                throw encrypting ? CryptoError.internalFailure : CryptoError.authenticationFailure
            }
            return finish(UnsafeRawBufferPointer(raw), Int(written + tail))
        }
    }
}

extension SecretBytes {
    /// Copies the first `count` bytes of `buffer` into new wiping storage.
    convenience init(copyingPrefix count: Int, of buffer: UnsafeRawBufferPointer) {
        try! self.init(count: count) { (out: UnsafeMutableRawBufferPointer) throws in
            out.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }
}
