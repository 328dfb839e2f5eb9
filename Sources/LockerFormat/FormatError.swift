/// Errors from decoding Locker's byte formats.
public enum FormatError: Error, Equatable, Sendable {
    /// Compressed data was malformed, truncated, or would decode past its
    /// declared or allowed size.
    case corruptCompressedData
    /// An input was larger than the format allows.
    case inputTooLarge
}
