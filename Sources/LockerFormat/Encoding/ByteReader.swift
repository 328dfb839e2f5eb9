/// Reads big-endian fields from an untrusted byte buffer. Every read is
/// bounds-checked and throws ``FormatError/truncated`` past the end.
public struct ByteReader {
    public let bytes: [UInt8]
    public private(set) var offset: Int

    public init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    public var remaining: Int { bytes.count - offset }

    public mutating func read(_ count: Int) throws -> [UInt8] {
        guard count >= 0, count <= remaining else { throw FormatError.truncated }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    public mutating func readUInt8() throws -> UInt8 {
        guard remaining >= 1 else { throw FormatError.truncated }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func readUInt16() throws -> UInt16 { UInt16(try readInteger(2)) }
    public mutating func readUInt32() throws -> UInt32 { UInt32(try readInteger(4)) }
    public mutating func readUInt64() throws -> UInt64 { try readInteger(8) }

    private mutating func readInteger(_ width: Int) throws -> UInt64 {
        guard remaining >= width else { throw FormatError.truncated }
        var value: UInt64 = 0
        for i in 0..<width { value = value << 8 | UInt64(bytes[offset + i]) }
        offset += width
        return value
    }

    /// Throws ``FormatError/trailingBytes`` unless every byte was read.
    public func expectEnd() throws {
        guard remaining == 0 else { throw FormatError.trailingBytes }
    }
}

/// Appends big-endian fields to a byte buffer.
public struct ByteWriter {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 64) { bytes.reserveCapacity(capacity) }

    public mutating func write(_ data: [UInt8]) { bytes.append(contentsOf: data) }
    public mutating func write(_ value: UInt8) { bytes.append(value) }
    public mutating func write(_ value: UInt16) { writeInteger(UInt64(value), 2) }
    public mutating func write(_ value: UInt32) { writeInteger(UInt64(value), 4) }
    public mutating func write(_ value: UInt64) { writeInteger(value, 8) }

    private mutating func writeInteger(_ value: UInt64, _ width: Int) {
        for i in (0..<width).reversed() { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) }
    }
}
