/// Errors from decoding Locker's byte formats.
///
/// Decoders treat every input as hostile: any of these means the bytes are
/// not what Locker wrote, and nothing decoded from them may be used.
public enum FormatError: Error, Equatable, Sendable {
    /// Compressed data was malformed, truncated, or would decode past its
    /// declared or allowed size.
    case corruptCompressedData
    /// An input was larger than the format allows.
    case inputTooLarge
    /// The bytes end before the structure does.
    case truncated
    /// The magic bytes are not this format's.
    case badMagic
    /// A version this build does not read.
    case unsupportedVersion(UInt16)
    /// A field holds a value the format forbids.
    case invalidField(String)
    /// Bytes follow the end of the structure.
    case trailingBytes
}
