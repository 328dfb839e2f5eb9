internal import COpenSSL
#if canImport(Glibc)
internal import Glibc
#endif

/// Runs one libcrypto EVP_KDF derivation.
///
/// OSSL_PARAM holds pointers to its values, so every key and value is
/// copied into storage owned here that lives until the derive call
/// returns. Secret values stay in ``SecretBytes`` so they are wiped.
enum OSSLKDF {
    final class Parameters {
        fileprivate var list: [OSSL_PARAM] = []
        fileprivate var cStrings: [UnsafeMutablePointer<CChar>] = []
        fileprivate var secrets: [SecretBytes] = []
        fileprivate var integers: [UnsafeMutablePointer<UInt64>] = []

        deinit {
            cStrings.forEach { free($0) }
            integers.forEach { $0.deallocate() }
        }

        private func pin(_ string: String) -> UnsafeMutablePointer<CChar> {
            let copy = strdup(string)!
            cStrings.append(copy)
            return copy
        }

        func utf8(_ key: String, _ value: String) {
            list.append(OSSL_PARAM_construct_utf8_string(pin(key), pin(value), 0))
        }

        func octets(_ key: String, _ value: SecretBytes) {
            secrets.append(value)
            list.append(OSSL_PARAM_construct_octet_string(pin(key), value.unsafeBaseAddress, value.count))
        }

        func octets(_ key: String, _ value: [UInt8]) {
            octets(key, SecretBytes(copying: value))
        }

        func unsigned(_ key: String, _ value: UInt64) {
            let slot = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
            slot.initialize(to: value)
            integers.append(slot)
            list.append(OSSL_PARAM_construct_uint64(pin(key), slot))
        }
    }

    /// Derives with `kdf`, a fetched KDF (see ``Fetched``).
    static func derive(
        _ kdf: Fetched.Handle?,
        outputByteCount: Int,
        configure: (Parameters) throws -> Void
    ) throws -> SecretBytes {
        let parameters = Parameters()
        try configure(parameters)
        parameters.list.append(OSSL_PARAM_construct_end())
        guard let kdf = kdf?.pointer else { throw CryptoError.internalFailure }
        guard let context = EVP_KDF_CTX_new(kdf) else { throw CryptoError.internalFailure }
        defer { EVP_KDF_CTX_free(context) }
        return try SecretBytes(count: outputByteCount) { out throws in
            let ok = withExtendedLifetime(parameters) {
                parameters.list.withUnsafeBufferPointer { params in
                    EVP_KDF_derive(context, out.bindMemory(to: UInt8.self).baseAddress, outputByteCount, params.baseAddress) == 1
                }
            }
            guard ok else {
                ERR_clear_error()
                throw CryptoError.invalidParameter
            }
        }
    }
}
