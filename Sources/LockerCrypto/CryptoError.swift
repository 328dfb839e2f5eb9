/// The errors every LockerCrypto operation can throw.
///
/// The set is closed and deliberately coarse. `authenticationFailure` is the
/// only answer to a tag, MAC or key-wrap integrity check that did not pass,
/// and it never says which byte or which check was wrong.
public enum CryptoError: Error, Equatable, Sendable {
    /// A tag, MAC or key-wrap integrity check failed.
    case authenticationFailure
    /// A key had a length this algorithm does not take.
    case invalidKeySize
    /// A nonce was not exactly 96 bits.
    case invalidNonceSize
    /// An input had a length the algorithm cannot process (for example a
    /// wrapped key shorter than 24 bytes or not a multiple of 8).
    case invalidInputSize
    /// A peer's public key was malformed or produced an all-zero shared
    /// secret (a small-order point). Treated as hostile input.
    case invalidPublicKey
    /// A parameter was out of range (KDF cost, output length).
    case invalidParameter
    /// libcrypto failed in a way the caller cannot correct (allocation,
    /// random generator failure). Carries no detail from libcrypto's error
    /// queue, which may mention internal state.
    case internalFailure
}
