internal import COpenSSL

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

    var name: String {
        switch self {
        case .sha256: "SHA256"
        case .sha512: "SHA512"
        }
    }

    /// The fetched digest (see ``Fetched``).
    var evp: OpaquePointer {
        get throws { try Self.pointer(self == .sha256 ? Fetched.sha256 : Fetched.sha512) }
    }

    /// An HMAC context with this digest and no key, to copy (see ``Fetched``).
    var hmacTemplate: OpaquePointer {
        get throws { try Self.pointer(self == .sha256 ? Fetched.hmacSHA256 : Fetched.hmacSHA512) }
    }

    private static func pointer(_ fetched: Fetched.Handle?) throws -> OpaquePointer {
        guard let fetched else { throw CryptoError.internalFailure }
        return fetched.pointer
    }
}

/// HKDF (RFC 5869), extract then expand.
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
        guard outputByteCount > 0, outputByteCount <= 255 * hash.byteCount else { throw CryptoError.invalidParameter }
        return try OSSLKDF.derive(Fetched.hkdf, outputByteCount: outputByteCount) { params throws in
            params.utf8(OSSL_KDF_PARAM_DIGEST, hash.name)
            params.octets(OSSL_KDF_PARAM_KEY, inputKeyMaterial)
            if !salt.isEmpty { params.octets(OSSL_KDF_PARAM_SALT, salt) }
            // An empty info is the same as none.
            if !info.isEmpty { params.octets(OSSL_KDF_PARAM_INFO, info) }
        }
    }
}
