internal import LockerDevice
internal import LockerFormat

/// `DeviceStatus` as the JSON document a status reply carries
/// (docs/agent-protocol.md): one object, its keys sorted, an absent
/// optional left out, as `JSONEncoder` writes it with `.sortedKeys` and
/// `.withoutEscapingSlashes` (a `/` needs no escape in JSON).
///
/// Written here rather than by `JSONEncoder` so that the agent links no
/// Foundation; the client reads it with `JSONDecoder`, and a test checks
/// that every field comes back as it went in.
enum StatusDocument {
    /// The document for `status`. Throws ``AgentError/invalidArgument(_:)``
    /// for a number JSON cannot carry (infinite or NaN).
    static func encode(_ status: DeviceStatus) throws -> [UInt8] {
        var fields: [(String, Value)] = [
            ("state", .string(status.state.rawValue)),
            ("passcodeSet", .bool(status.passcodeSet)),
            ("readableClasses", .strings(status.readableClasses)),
            ("creatableClasses", .strings(status.creatableClasses)),
            ("graceSeconds", .integer(status.graceSeconds)),
            ("failedAttempts", .integer(status.failedAttempts)),
            ("keyGeneration", .integer(status.keyGeneration)),
            ("defaultClass", .string(status.defaultClass)),
            ("openObjects", .objects(status.openObjects)),
            ("isProtectedDataAvailable", .bool(status.isProtectedDataAvailable)),
        ]
        if let seconds = status.graceRemaining { fields.append(("graceRemaining", .number(seconds))) }
        if let time = status.nextAttemptAllowedAt { fields.append(("nextAttemptAllowedAt", .number(time))) }
        if let count = status.eraseAfter { fields.append(("eraseAfter", .integer(count))) }
        fields.sort { $0.0 < $1.0 }

        var out: [UInt8] = []
        out.reserveCapacity(256 + status.openObjects.count * 96)
        out.append(UInt8(ascii: "{"))
        for (index, (key, value)) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            try append(value, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    private enum Value {
        case string(String)
        case strings([String])
        case bool(Bool)
        case integer(Int)
        case number(Double)
        case objects([DeviceStatus.OpenObject])
    }

    private static func append(_ value: Value, to out: inout [UInt8]) throws {
        switch value {
        case .string(let text):
            appendString(text, to: &out)
        case .strings(let texts):
            out.append(UInt8(ascii: "["))
            for (index, text) in texts.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendString(text, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .bool(let flag):
            out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number):
            out.append(contentsOf: String(number).utf8)
        case .number(let number):
            guard number.isFinite else { throw AgentError.invalidArgument("a status time that JSON cannot carry") }
            // Swift's shortest round-trip form ("2.5", "1e-05", "1.7e+20")
            // is a JSON number once an integral value's ".0" is dropped.
            var text = number.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out.append(contentsOf: text.utf8)
        case .objects(let objects):
            out.append(UInt8(ascii: "["))
            for (index, object) in objects.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                // Sorted: "id" before "protection".
                out.append(contentsOf: #"{"id":"#.utf8)
                appendString(object.id, to: &out)
                out.append(contentsOf: #","protection":"#.utf8)
                appendString(object.protection, to: &out)
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
        }
    }

    /// `text` as a JSON string (RFC 8259, section 7): the quotation mark,
    /// the reverse solidus and U+0000 … U+001F escaped (with the short
    /// forms `\b`, `\f`, `\n`, `\r` and `\t` where there is one, as
    /// `JSONEncoder` does), every other scalar as its UTF-8 bytes.
    private static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(Hex.digits[Int(byte >> 4)])
                out.append(Hex.digits[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
