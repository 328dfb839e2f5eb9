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
        try seal(head: plaintext, body: UnsafeRawBufferPointer(start: nil, count: 0), nonce: nonce,
                 authenticating: aad, into: output)
    }

    /// Seals the plaintext `head || body` without first joining the two:
    /// `output`, which must hold `head.count + body.count + 16` bytes, gets
    /// the ciphertext of `head`, then that of `body`, then the tag, exactly
    /// as ``seal(_:nonce:authenticating:into:)`` of the joined plaintext
    /// would give. Each part may be sealed in place, at its own position in
    /// `output`.
    public func seal(
        head: UnsafeRawBufferPointer,
        body: UnsafeRawBufferPointer,
        nonce: AESGCM.Nonce,
        authenticating aad: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        let length = head.count + body.count
        precondition(output.count >= length + AESGCM.tagByteCount, "output too small for seal")
        guard length < Int(Int32.max), aad.count < Int(Int32.max) else { throw CryptoError.invalidInputSize }
        try start(nonce: nonce, encrypting: true)
        try authenticate(aad)
        let out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
        var written = try update(head, into: out)
        written += try update(body, into: out + written)
        var tail: Int32 = 0
        guard EVP_CipherFinal_ex(context, out + written, &tail) == 1 else { throw CryptoError.internalFailure }
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AESGCM.tagByteCount), out + length) == 1
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
        try open(sealed, nonce: nonce, authenticating: aad, head: UnsafeMutableRawBufferPointer(rebasing: output[..<length]),
                 body: UnsafeMutableRawBufferPointer(start: nil, count: 0))
        return length
    }

    /// Opens `sealed` (ciphertext then 16-byte tag) as
    /// ``open(_:nonce:authenticating:into:)`` does, but into two places:
    /// the plaintext's first `head.count` bytes go to `head` and the rest
    /// to `body`, which together must hold exactly `sealed.count - 16`
    /// bytes. Each may be `sealed`'s own bytes at its position (in place).
    ///
    /// On an authentication failure both are zeroed and
    /// ``CryptoError/authenticationFailure`` is thrown.
    public func open(
        _ sealed: UnsafeRawBufferPointer,
        nonce: AESGCM.Nonce,
        authenticating aad: UnsafeRawBufferPointer,
        head: UnsafeMutableRawBufferPointer,
        body: UnsafeMutableRawBufferPointer
    ) throws {
        guard sealed.count >= AESGCM.tagByteCount else { throw CryptoError.authenticationFailure }
        let length = sealed.count - AESGCM.tagByteCount
        precondition(head.count + body.count == length, "open's outputs do not match the ciphertext")
        guard sealed.count < Int(Int32.max), aad.count < Int(Int32.max) else { throw CryptoError.invalidInputSize }
        // The tag is copied first, to the stack (no allocation per call):
        // the control call takes a writable pointer, and `sealed` is the
        // caller's, possibly overwritten in place up to the tag.
        var tag: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &tag) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: sealed[length...])) }
        try start(nonce: nonce, encrypting: false)
        try authenticate(aad)
        _ = try update(UnsafeRawBufferPointer(rebasing: sealed[..<head.count]), into: head.baseAddress)
        _ = try update(UnsafeRawBufferPointer(rebasing: sealed[head.count..<length]), into: body.baseAddress)
        let tagSet = withUnsafeMutableBytes(of: &tag) {
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AESGCM.tagByteCount), $0.baseAddress)
        }
        guard tagSet == 1 else { throw CryptoError.internalFailure }
        // GCM writes nothing at the end; the pointer only has to be valid.
        var tail: Int32 = 0
        var sink: UInt8 = 0
        let verified = EVP_CipherFinal_ex(context, &sink, &tail) == 1
        guard verified else {
            for part in [head, body] where part.count > 0 {
                part.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: part.count)
            }
            throw CryptoError.authenticationFailure
        }
    }

    /// Encrypts or decrypts `input` into `output`, continuing the message
    /// under way, and returns the bytes written (GCM writes them all).
    private func update(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawPointer?) throws -> Int {
        guard input.count > 0 else { return 0 }
        var written: Int32 = 0
        guard EVP_CipherUpdate(context, output!.assumingMemoryBound(to: UInt8.self), &written,
                               input.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(input.count)) == 1,
              Int(written) == input.count
        else { throw CryptoError.internalFailure }
        return Int(written)
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
