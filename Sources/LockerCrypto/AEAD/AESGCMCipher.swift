internal import COpenSSL

/// An AES-256-GCM key schedule, for sealing and opening many chunks under
/// one key without per-call setup.
///
/// An instance owns a libcrypto cipher context and is not safe to use from
/// two threads at once; give each worker its own. Sealing and opening work
/// in place when input and output start at the same address.
public final class AESGCMCipher {
    private let context: OpaquePointer

    /// Schedules `key`, which must be 32 bytes.
    public init(key: SecretBytes) throws {
        guard key.count == AESGCM.keyByteCount else { throw CryptoError.invalidKeySize }
        guard let cipher = Fetched.aes256GCM?.pointer, let context = EVP_CIPHER_CTX_new() else { throw CryptoError.internalFailure }
        self.context = context
        let ok = key.withUnsafeBytes { k in
            EVP_CipherInit_ex(context, cipher, nil, k.bindMemory(to: UInt8.self).baseAddress, nil, 1) == 1
        }
        guard ok else { throw CryptoError.internalFailure }
    }

    deinit {
        // Frees and cleanses the key schedule.
        EVP_CIPHER_CTX_free(context)
    }

    /// Seals `plaintext` into `output`, which must hold
    /// `plaintext.count + 16` bytes: the ciphertext, then the tag.
    public func seal(
        _ plaintext: UnsafeRawBufferPointer,
        nonce: AESGCM.Nonce,
        authenticating aad: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        precondition(output.count >= plaintext.count + AESGCM.tagByteCount, "output too small for seal")
        guard plaintext.count < Int(Int32.max), aad.count < Int(Int32.max) else { throw CryptoError.invalidInputSize }
        try start(nonce: nonce, encrypting: true)
        try authenticate(aad)
        var written: Int32 = 0
        if plaintext.count > 0 {
            guard EVP_CipherUpdate(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written,
                                   plaintext.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(plaintext.count)) == 1
            else { throw CryptoError.internalFailure }
        }
        var tail: Int32 = 0
        guard EVP_CipherFinal_ex(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self) + Int(written), &tail) == 1
        else { throw CryptoError.internalFailure }
        let tag = output.baseAddress! + plaintext.count
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AESGCM.tagByteCount), tag) == 1
        else { throw CryptoError.internalFailure }
    }

    /// Opens `sealed` (ciphertext then 16-byte tag) into `output`, which
    /// must hold `sealed.count - 16` bytes, and returns the plaintext length.
    ///
    /// On an authentication failure `output` is zeroed, so no unverified
    /// byte survives, and ``CryptoError/authenticationFailure`` is thrown.
    @discardableResult
    public func open(
        _ sealed: UnsafeRawBufferPointer,
        nonce: AESGCM.Nonce,
        authenticating aad: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws -> Int {
        guard sealed.count >= AESGCM.tagByteCount else { throw CryptoError.authenticationFailure }
        let length = sealed.count - AESGCM.tagByteCount
        precondition(output.count >= length, "output too small for open")
        guard sealed.count < Int(Int32.max), aad.count < Int(Int32.max) else { throw CryptoError.invalidInputSize }
        // Keep the tag aside first: with in-place decryption the output
        // overwrites the ciphertext but never the tag that follows it.
        var tag = [UInt8](UnsafeRawBufferPointer(rebasing: sealed[length...]))
        try start(nonce: nonce, encrypting: false)
        try authenticate(aad)
        var written: Int32 = 0
        if length > 0 {
            guard EVP_CipherUpdate(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written,
                                   sealed.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(length)) == 1
            else { throw CryptoError.internalFailure }
        }
        let tagSet = tag.withUnsafeMutableBytes {
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AESGCM.tagByteCount), $0.baseAddress)
        }
        guard tagSet == 1 else { throw CryptoError.internalFailure }
        var tail: Int32 = 0
        let scratch = output.baseAddress.map { $0.assumingMemoryBound(to: UInt8.self) + Int(written) }
        var sink: UInt8 = 0
        let verified = withUnsafeMutablePointer(to: &sink) { fallback in
            EVP_CipherFinal_ex(context, scratch ?? fallback, &tail) == 1
        }
        guard verified else {
            if length > 0 { output.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: length) }
            throw CryptoError.authenticationFailure
        }
        return length
    }

    private func start(nonce: AESGCM.Nonce, encrypting: Bool) throws {
        let ok = try nonce.withUnsafeBytes { iv in
            EVP_CipherInit_ex(context, nil, nil, nil, iv.bindMemory(to: UInt8.self).baseAddress, encrypting ? 1 : 0) == 1
        }
        guard ok else { throw CryptoError.internalFailure }
    }

    private func authenticate(_ aad: UnsafeRawBufferPointer) throws {
        guard aad.count > 0 else { return }
        var ignored: Int32 = 0
        guard EVP_CipherUpdate(context, nil, &ignored, aad.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(aad.count)) == 1
        else { throw CryptoError.internalFailure }
    }
}
