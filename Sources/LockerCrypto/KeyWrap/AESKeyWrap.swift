internal import COpenSSL

/// AES key wrap: RFC 3394 (KW) and RFC 5649 (KWP, with padding).
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
        guard key.count >= 16, key.count % 8 == 0 else { throw CryptoError.invalidInputSize }
        return try key.withUnsafeBytes { input throws in
            try run(.kw, encrypting: true, kek: kek, input: input, outputCapacity: input.count + 8) { out, n in
                Array(UnsafeRawBufferPointer(rebasing: out[..<n]))
            }
        }
    }

    /// Unwraps an RFC 3394 `wrapped` key. `wrapped` must be at least 24
    /// bytes and a multiple of 8; a failed integrity check is
    /// ``CryptoError/authenticationFailure``.
    public static func unwrap(_ wrapped: [UInt8], kek: SecretBytes) throws -> SecretBytes {
        guard wrapped.count >= 24, wrapped.count % 8 == 0 else { throw CryptoError.invalidInputSize }
        return try wrapped.withUnsafeBytes { input throws in
            try run(.kw, encrypting: false, kek: kek, input: input, outputCapacity: input.count) { out, n in
                SecretBytes(copyingPrefix: n, of: out)
            }
        }
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

    private enum Mode { case kw, kwp }

    private static func cipher(_ mode: Mode, kekSize: Int) throws -> OpaquePointer {
        let c: OpaquePointer? = switch (mode, kekSize) {
        case (.kw, 16): EVP_aes_128_wrap()
        case (.kw, 24): EVP_aes_192_wrap()
        // The size Locker uses, fetched once (see Fetched).
        case (.kw, 32): Fetched.aes256Wrap?.pointer
        case (.kwp, 16): EVP_aes_128_wrap_pad()
        case (.kwp, 24): EVP_aes_192_wrap_pad()
        case (.kwp, 32): Fetched.aes256WrapPad?.pointer
        default: nil
        }
        guard let c else { throw CryptoError.invalidKeySize }
        return c
    }

    /// Runs one wrap or unwrap. The output goes to a wiping scratch buffer,
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
        return try scratch.withUnsafeBytes { raw throws in
            let out = UnsafeMutablePointer(mutating: raw.bindMemory(to: UInt8.self).baseAddress!)
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
            return finish(raw, Int(written + tail))
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
