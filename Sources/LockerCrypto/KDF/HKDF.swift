/// The hash functions Locker's KDFs and MACs may use.
public enum HashFunction: Sendable {
    case sha256
    case sha512

    /// The digest length in bytes.
    public var byteCount: Int {
        switch self {
        case .sha256: 32
        case .sha512: 64
        }
    }

    /// The block length in bytes, which HMAC pads its key to.
    var blockByteCount: Int {
        switch self {
        case .sha256: 64
        case .sha512: 128
        }
    }

    /// The fetched digest (see ``Fetched``).
    var evp: OpaquePointer {
        get throws { try Self.pointer(self == .sha256 ? Fetched.sha256 : Fetched.sha512) }
    }

    private static func pointer(_ fetched: Fetched.Handle?) throws -> OpaquePointer {
        guard let fetched else { throw CryptoError.internalFailure }
        return fetched.pointer
    }
}

/// HKDF (RFC 5869), extract then expand.
///
/// Built on ``HMAC`` rather than libcrypto's HKDF: that one looks its HMAC
/// and digest up by name, under a lock, on every call, which made key
/// derivation a tenth of the CPU of storing many small objects. The steps
/// are the RFC's, and the KDF vector tests (RFC 5869, Wycheproof) hold them
/// to it.
public enum HKDF {
    /// Derives `outputByteCount` bytes from `inputKeyMaterial`.
    ///
    /// An empty `salt` means the RFC's default (a string of zeros).
    /// `outputByteCount` must be between 1 and 255 times the digest length.
    public static func deriveKey(
        _ hash: HashFunction = .sha256,
        inputKeyMaterial: SecretBytes,
        salt: [UInt8] = [],
        info: [UInt8] = [],
        outputByteCount: Int
    ) throws -> SecretBytes {
        try salt.withUnsafeBytes { s throws in
            try derive(hash, inputKeyMaterial: inputKeyMaterial, salt: s, info: info, outputByteCount: outputByteCount)
        }
    }

    /// ``deriveKey(_:inputKeyMaterial:salt:info:outputByteCount:)`` with a
    /// secret salt (a device key used as the extract key), which stays in
    /// wiping storage: no array copy of it is made.
    public static func deriveKey(
        _ hash: HashFunction = .sha256,
        inputKeyMaterial: SecretBytes,
        secretSalt: SecretBytes,
        info: [UInt8] = [],
        outputByteCount: Int
    ) throws -> SecretBytes {
        try secretSalt.withUnsafeBytes { s throws in
            try derive(hash, inputKeyMaterial: inputKeyMaterial, salt: s, info: info, outputByteCount: outputByteCount)
        }
    }

    private static func derive(
        _ hash: HashFunction, inputKeyMaterial: SecretBytes, salt: UnsafeRawBufferPointer, info: [UInt8],
        outputByteCount: Int
    ) throws -> SecretBytes {
        let length = hash.byteCount
        guard outputByteCount > 0, outputByteCount <= 255 * length else { throw CryptoError.invalidParameter }
        // Extract: PRK = HMAC(salt, IKM); an empty salt is the RFC's
        // string of zeros.
        let zeros = [UInt8](repeating: 0, count: salt.isEmpty ? length : 0)
        let pseudorandomKey = try SecretBytes(count: length) { prk throws in
            try zeros.withUnsafeBytes { z throws in
                try inputKeyMaterial.withUnsafeBytes { ikm throws in
                    try HMAC.compute(hash, key: salt.isEmpty ? z : salt, message: [ikm], into: prk)
                }
            }
        }
        // Expand: T(i) = HMAC(PRK, T(i-1) | info | i), output T(1) | T(2) | ...
        // Whole blocks go straight into the output, where the next block
        // reads them back; a last partial block goes through a wiped scratch.
        return try SecretBytes(count: outputByteCount) { out throws in
            try pseudorandomKey.withUnsafeBytes { prk throws in
                try info.withUnsafeBytes { infoBytes throws in
                    for offset in stride(from: 0, to: outputByteCount, by: length) {
                        let counter = UInt8(offset / length + 1)  // at most 255: checked above
                        let previous = UnsafeRawBufferPointer(rebasing: out[max(0, offset - length)..<offset])
                        let rest = outputByteCount - offset
                        try withUnsafeBytes(of: counter) { c throws in
                            let message = [previous, infoBytes, c]
                            if rest >= length {
                                try HMAC.compute(hash, key: prk, message: message,
                                                 into: UnsafeMutableRawBufferPointer(rebasing: out[offset..<(offset + length)]))
                                return
                            }
                            let last = try SecretBytes(count: length) { block throws in
                                try HMAC.compute(hash, key: prk, message: message, into: block)
                            }
                            last.withUnsafeBytes { block in
                                UnsafeMutableRawBufferPointer(rebasing: out[offset...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: block[..<rest]))
                            }
                        }
                    }
                }
            }
        }
    }
}
