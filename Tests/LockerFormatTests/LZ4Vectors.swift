import Foundation
import LockerCrypto
import Testing

// The LZ4 interoperability set in Vectors/lz4 (made with the reference lz4
// tool 1.9.4; see Vectors/README.md). Everything is read from this test
// target's resource bundle.

struct LZ4Manifest: Decodable, Sendable {
    struct Input: Decodable, Sendable {
        let file: String
        let size: Int
        let sha256: String
        let description: String
    }

    struct ValidFrame: Decodable, Sendable {
        let file: String
        let decodesTo: String
        let command: String
        let size: Int
        let sha256: String
        let exercises: String
        let expect: String
    }

    struct InvalidFrame: Decodable, Sendable {
        let file: String
        let derivedFrom: String
        let size: Int
        let sha256: String
        let mutation: String
        let expect: String
    }

    struct RawBlock: Decodable, Sendable {
        let file: String
        let size: Int
        let sha256: String
        let decompressedSize: Int
        let decompressedSha256: String
        let decodesTo: String
        let howMade: String
        let expect: String
    }

    let tool: String
    let inputs: [Input]
    let validFrames: [ValidFrame]
    let invalidFrames: [InvalidFrame]
    let rawBlocks: [RawBlock]

    enum CodingKeys: String, CodingKey {
        case tool, inputs
        case validFrames = "valid_frames"
        case invalidFrames = "invalid_frames"
        case rawBlocks = "raw_blocks"
    }
}

enum LZ4Vectors {
    static func directory() throws -> URL {
        let vectors = try #require(Bundle.module.url(forResource: "Vectors", withExtension: nil),
                                   "the Vectors resource folder is missing from the LockerFormatTests bundle")
        return vectors.appendingPathComponent("lz4", isDirectory: true)
    }

    static func url(_ relativePath: String) throws -> URL {
        try directory().appendingPathComponent(relativePath, isDirectory: false)
    }

    static func bytes(_ relativePath: String) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: url(relativePath)))
    }

    static func manifest() throws -> LZ4Manifest {
        try JSONDecoder().decode(LZ4Manifest.self, from: Data(contentsOf: url("manifest.json")))
    }

    /// The file names in one subfolder, sorted, as "folder/name".
    static func listing(_ folder: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory().appendingPathComponent(folder).path)
            .filter { !$0.hasPrefix(".") }
            .map { "\(folder)/\($0)" }
            .sorted()
    }
}

func sha256Hex(_ bytes: [UInt8]) throws -> String {
    try Digest.hash(.sha256, bytes).map { String(format: "%02x", $0) }.joined()
}
