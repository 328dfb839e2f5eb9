/// The fuzzer's bytes, consumed front to back. Reads past the end return
/// nil, so a target can give up on short inputs without throwing.
public struct FuzzInput {
    public let bytes: [UInt8]
    public private(set) var offset = 0

    public init(_ data: UnsafePointer<UInt8>, _ size: Int) {
        bytes = Array(UnsafeBufferPointer(start: data, count: size))
    }

    public var remaining: Int { bytes.count - offset }

    public mutating func take(_ count: Int) -> [UInt8]? {
        guard count >= 0, count <= remaining else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    public mutating func uint8() -> UInt8? { take(1).map { $0[0] } }
    public mutating func uint16() -> UInt16? { take(2).map { UInt16($0[0]) << 8 | UInt16($0[1]) } }
    public mutating func uint24() -> UInt32? { take(3).map { UInt32($0[0]) << 16 | UInt32($0[1]) << 8 | UInt32($0[2]) } }
    public mutating func uint32() -> UInt32? { take(4).map { $0.reduce(0) { $0 << 8 | UInt32($1) } } }

    /// Every byte not read yet.
    public mutating func rest() -> [UInt8] { take(remaining)! }
}

/// Stops the run with a crash libFuzzer records, when a decoder broke a
/// property that must hold for every input (a round trip, an
/// accept/refuse rule). A decoder that throws is not a failure.
public func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String,
                      file: StaticString = #fileID, line: UInt = #line) {
    if !condition { fatalError("fuzz property violated: \(message())", file: file, line: line) }
}
