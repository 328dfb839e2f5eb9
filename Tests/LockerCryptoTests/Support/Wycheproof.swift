import Foundation
import LockerCrypto
import Testing

// A small Wycheproof loader in the style of apple/swift-crypto's
// Tests/CryptoTests/Utils/Wycheproof.swift: one generic Codable envelope,
// one Codable group/case pair per algorithm, and a runner per algorithm.
//
// Everything is read from the `Vectors` resource folder of this test target
// (Bundle.module); nothing outside the repository is read.

/// The outer shape shared by every Wycheproof (and `rfc/`) JSON file.
struct WycheproofFile<Group: Decodable & Sendable>: Decodable, Sendable {
    let algorithm: String
    let numberOfTests: Int
    let testGroups: [Group]
}

/// The `result` field of a test case.
enum WycheproofResult: String, Decodable, Sendable {
    case valid
    case invalid
    case acceptable
}

/// A byte string written as lowercase hex in the JSON ("" is zero bytes).
/// Decoding fails on anything that is not an even number of hex digits, so a
/// malformed field can never turn into a silently shortened vector.
struct HexBytes: Decodable, Sendable, Equatable {
    let bytes: [UInt8]

    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let bytes = [UInt8](hex: text) else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath, debugDescription: "not a hex string: \(text.prefix(40))"))
        }
        self.bytes = bytes
    }

    var count: Int { bytes.count }
}

extension Array where Element == UInt8 {
    /// Decodes hex digits (either case); nil unless every character is a hex
    /// digit and there is an even number of them.
    init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        self = out
    }

    /// Lowercase hex.
    var hex: String {
        let table = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(table[Int(byte >> 4)])
            out.append(table[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Access to the `Vectors` resource folder.
enum Vectors {
    static func directory() throws -> URL {
        try #require(Bundle.module.url(forResource: "Vectors", withExtension: nil),
                     "the Vectors resource folder is missing from the LockerCryptoTests bundle")
    }

    static func data(_ name: String) throws -> Data {
        try Data(contentsOf: directory().appendingPathComponent(name, isDirectory: false))
    }

    /// Loads and decodes one JSON vector file.
    static func load<Group>(_ name: String, as _: Group.Type = Group.self) throws -> WycheproofFile<Group> {
        try JSONDecoder().decode(WycheproofFile<Group>.self, from: data(name))
    }
}

/// How one vector was used.
enum VectorOutcome: Sendable {
    /// A `valid` case, checked for success with the exact output.
    case valid
    /// An `invalid` case, checked to fail.
    case invalid
    /// An `acceptable` case, checked against the runner's documented choice.
    case acceptable
    /// A case with parameters our API deliberately does not take; the runner
    /// checked that the API refuses them.
    case notApplicable
    /// A case that was parsed but deliberately not run (the reason is printed).
    case skipped
}

/// Per-category counts of one file's run.
struct VectorCounts: Equatable, Sendable, CustomStringConvertible {
    var valid = 0
    var invalid = 0
    var acceptable = 0
    var notApplicable = 0
    var skipped = 0

    var consumed: Int { valid + invalid + acceptable + notApplicable + skipped }

    var description: String {
        "consumed=\(consumed) valid=\(valid) invalid=\(invalid) acceptable=\(acceptable) "
            + "notApplicable=\(notApplicable)" + (skipped > 0 ? " skipped=\(skipped)" : "")
    }
}

/// Bookkeeping for one vector file: counts every case exactly once, names
/// the file and tcId in every message, and at the end compares the counts
/// with the file's `numberOfTests` and with the runner's hard-coded
/// expectation, then prints one `vectors:` line.
struct VectorRun: Sendable {
    let file: String
    let numberOfTests: Int
    private(set) var counts = VectorCounts()
    /// Extra `key=value` details for the printed line (sub-categories).
    private var details: [(String, Int)] = []
    private var notes: [String] = []

    init<Group>(_ file: String, _ vectors: WycheproofFile<Group>) {
        self.file = file
        self.numberOfTests = vectors.numberOfTests
    }

    /// "file tcId N", the prefix of every failure message.
    func id(_ tcId: Int) -> String { "\(file) tcId \(tcId)" }

    mutating func record(_ outcome: VectorOutcome) {
        switch outcome {
        case .valid: counts.valid += 1
        case .invalid: counts.invalid += 1
        case .acceptable: counts.acceptable += 1
        case .notApplicable: counts.notApplicable += 1
        case .skipped: counts.skipped += 1
        }
    }

    /// Counts a named sub-category (printed, and checkable with `detail`).
    mutating func count(_ key: String) {
        if let index = details.firstIndex(where: { $0.0 == key }) {
            details[index].1 += 1
        } else {
            details.append((key, 1))
        }
    }

    func detail(_ key: String) -> Int { details.first { $0.0 == key }?.1 ?? 0 }

    mutating func note(_ text: String) { notes.append(text) }

    /// Runs `body` for every case and records the outcome it returns. An
    /// unexpected error is an issue naming the file and tcId; the case is
    /// still counted under its file result so the totals stay exact.
    mutating func each<Case>(
        _ cases: [Case], tcId: (Case) -> Int, result: (Case) -> WycheproofResult,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: (Case, inout VectorRun) throws -> VectorOutcome
    ) {
        for testCase in cases {
            do {
                let outcome = try body(testCase, &self)
                record(outcome)
            } catch {
                Issue.record("\(id(tcId(testCase))): unexpected error \(error)", sourceLocation: sourceLocation)
                switch result(testCase) {
                case .valid: record(.valid)
                case .invalid: record(.invalid)
                case .acceptable: record(.acceptable)
                }
            }
        }
    }

    /// Checks the totals and prints the summary line.
    func finish(expecting expected: VectorCounts,
                details expectedDetails: [String: Int] = [:],
                sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(counts.consumed == numberOfTests,
                "\(file): consumed \(counts.consumed) cases but numberOfTests is \(numberOfTests)",
                sourceLocation: sourceLocation)
        #expect(counts == expected,
                "\(file): counts \(counts) differ from the expected \(expected)", sourceLocation: sourceLocation)
        for (key, value) in expectedDetails.sorted(by: { $0.key < $1.key }) {
            #expect(detail(key) == value, "\(file): \(key)=\(detail(key)), expected \(value)",
                    sourceLocation: sourceLocation)
        }
        var line = "vectors: \(file) \(counts)"
        if !details.isEmpty {
            line += " (" + details.map { "\($0.0)=\($0.1)" }.joined(separator: " ") + ")"
        }
        for note in notes { line += "; " + note }
        print(line)
    }
}

/// The bytes of a secret, for failure messages and byte comparisons in
/// tests only.
func exposed(_ secret: SecretBytes) -> [UInt8] {
    secret.withUnsafeBytes { Array($0) }
}
