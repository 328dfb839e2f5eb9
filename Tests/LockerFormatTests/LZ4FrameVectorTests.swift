import Foundation
import LockerFormat
import Testing

@Suite("LZ4 frame and block vectors")
struct LZ4FrameVectorTests {
    @Test("every file is listed in manifest.json with the right size and SHA-256")
    func manifestMatchesFiles() throws {
        let manifest = try LZ4Vectors.manifest()
        #expect(manifest.tool.contains("v1.9.4"))
        #expect(manifest.inputs.count == 5 && manifest.validFrames.count == 13
                && manifest.invalidFrames.count == 10 && manifest.rawBlocks.count == 2,
                "manifest.json: unexpected number of entries")
        #expect(try LZ4Vectors.listing("frames") == manifest.validFrames.map(\.file).sorted(),
                "frames/ and manifest.json valid_frames disagree")
        #expect(try LZ4Vectors.listing("invalid") == manifest.invalidFrames.map(\.file).sorted(),
                "invalid/ and manifest.json invalid_frames disagree")
        #expect(try LZ4Vectors.listing("blocks") == manifest.rawBlocks.map(\.file).sorted(),
                "blocks/ and manifest.json raw_blocks disagree")
        var entries: [(String, Int, String)] = manifest.inputs.map { ($0.file, $0.size, $0.sha256) }
        entries += manifest.validFrames.map { ($0.file, $0.size, $0.sha256) }
        entries += manifest.invalidFrames.map { ($0.file, $0.size, $0.sha256) }
        entries += manifest.rawBlocks.map { ($0.file, $0.size, $0.sha256) }
        for (file, size, sha256) in entries {
            let bytes = try LZ4Vectors.bytes(file)
            #expect(bytes.count == size, "lz4/\(file): size \(bytes.count), manifest says \(size)")
            #expect(try sha256Hex(bytes) == sha256, "lz4/\(file): SHA-256 differs from manifest.json")
        }
    }

    @Test("every valid frame decodes to exactly its input")
    func validFrames() throws {
        let manifest = try LZ4Vectors.manifest()
        var decoded = 0
        for frame in manifest.validFrames {
            #expect(frame.expect == "ok", "lz4/\(frame.file): unexpected expect \(frame.expect)")
            let input = try LZ4Vectors.bytes(frame.file)
            let expected = try LZ4Vectors.bytes(frame.decodesTo)
            do {
                let output = try LZ4Frame.decompress(input)
                #expect(output.count == expected.count,
                        "lz4/\(frame.file): decoded \(output.count) bytes, expected \(expected.count)")
                #expect(output == expected, "lz4/\(frame.file): decoded bytes differ from \(frame.decodesTo)")
                #expect(try sha256Hex(output) == sha256Hex(expected), "lz4/\(frame.file): SHA-256 of output differs")
                decoded += 1
            } catch {
                Issue.record("lz4/\(frame.file) (\(frame.exercises)): decompress threw \(error)")
            }
        }
        #expect(decoded == 13, "lz4: decoded \(decoded) of 13 valid frames")
        print("vectors: lz4/manifest.json valid_frames consumed=\(manifest.validFrames.count) valid=\(decoded) invalid=0 acceptable=0 notApplicable=0")
    }

    @Test("every invalid frame throws and returns no output")
    func invalidFrames() throws {
        let manifest = try LZ4Vectors.manifest()
        var rejected = 0
        for frame in manifest.invalidFrames {
            #expect(frame.expect == "error", "lz4/\(frame.file): unexpected expect \(frame.expect)")
            let input = try LZ4Vectors.bytes(frame.file)
            var output: [UInt8]?
            let error = #expect(throws: FormatError.self, "lz4/\(frame.file) (\(frame.mutation)) was accepted") {
                output = try LZ4Frame.decompress(input)
            }
            #expect(output == nil, "lz4/\(frame.file): returned \(output?.count ?? 0) bytes of output")
            if error != nil { rejected += 1 }
        }
        #expect(rejected == 10, "lz4: rejected \(rejected) of 10 invalid frames")
        print("vectors: lz4/manifest.json invalid_frames consumed=\(manifest.invalidFrames.count) valid=0 invalid=\(rejected) acceptable=0 notApplicable=0")
    }

    @Test("a frame whose content checksum does not match its data is refused")
    func contentChecksumVerified() throws {
        // invalid/text.bitflip-in-block.lz4 decodes to wrong bytes of the right
        // length; only the content checksum can catch it.
        let input = try LZ4Vectors.bytes("invalid/text.bitflip-in-block.lz4")
        #expect(throws: FormatError.corruptCompressedData) { _ = try LZ4Frame.decompress(input) }
        let checksum = try LZ4Vectors.bytes("invalid/text.bad-content-checksum.lz4")
        #expect(throws: FormatError.corruptCompressedData) { _ = try LZ4Frame.decompress(checksum) }
    }

    @Test("every prefix of a valid frame is refused")
    func truncations() throws {
        let frame = try LZ4Vectors.bytes("frames/text_apache_license_2.0.txt.B4-BX-content-size.lz4")
        for length in 0..<frame.count where length < 64 || length % 97 == 0 || length > frame.count - 16 {
            #expect(throws: FormatError.self, "prefix of \(length) bytes was accepted") {
                _ = try LZ4Frame.decompress(Array(frame.prefix(length)))
            }
        }
    }

    @Test("single-bit corruptions of a checksummed frame throw or decode exactly")
    func corruptions() throws {
        // The frame has a header checksum and a content checksum, so every
        // change must either be refused or still decode to the original:
        // never a crash, never different bytes.
        let frame = try LZ4Vectors.bytes("frames/text_apache_license_2.0.txt.lz4")
        let original = try LZ4Vectors.bytes("inputs/text_apache_license_2.0.txt")
        var identical: [Int] = []
        for index in frame.indices {
            var mutated = frame
            mutated[index] ^= UInt8(1 << (index % 8))
            do {
                let output = try LZ4Frame.decompress(mutated)
                #expect(output == original, "byte \(index) flipped: decoded to different bytes")
                identical.append(index)
            } catch {}
        }
        // Exactly one of these flips (byte 3122, bit 2, inside the compressed
        // block) re-encodes the same text: it still decodes to identical
        // bytes with a matching content checksum, and the reference
        // `lz4 -d` accepts it too. Every other flip must be refused.
        #expect(identical == [3122], "flips that did not throw: \(identical)")
    }

    @Test("maxOutputSize is enforced")
    func outputLimit() throws {
        let frame = try LZ4Vectors.bytes("frames/repetitive_1MiB.bin.lz4")
        #expect(throws: FormatError.inputTooLarge) { _ = try LZ4Frame.decompress(frame, maxOutputSize: 1 << 19) }
        #expect(try LZ4Frame.decompress(frame, maxOutputSize: 1 << 20).count == 1 << 20)
    }

    @Test("raw blocks decode to the stated size and fail one byte short")
    func rawBlocks() throws {
        let manifest = try LZ4Vectors.manifest()
        for block in manifest.rawBlocks {
            let input = try LZ4Vectors.bytes(block.file)
            // decodesTo is "inputs/NAME" or "inputs/NAME (first N bytes)".
            let source = String(block.decodesTo.prefix { $0 != " " })
            let expected = Array(try LZ4Vectors.bytes(source).prefix(block.decompressedSize))
            #expect(expected.count == block.decompressedSize, "lz4/\(block.file): source shorter than decompressedSize")
            do {
                let output = try LZ4Block.decompress(input, size: block.decompressedSize)
                #expect(output == expected, "lz4/\(block.file): decoded bytes differ from \(block.decodesTo)")
                #expect(try sha256Hex(output) == block.decompressedSha256, "lz4/\(block.file): SHA-256 differs")
            } catch {
                Issue.record("lz4/\(block.file): decompress threw \(error)")
            }
            #expect(throws: FormatError.corruptCompressedData, "lz4/\(block.file): one byte short was accepted") {
                _ = try LZ4Block.decompress(input, size: block.decompressedSize - 1)
            }
            #expect(throws: FormatError.corruptCompressedData, "lz4/\(block.file): one byte long was accepted") {
                _ = try LZ4Block.decompress(input, size: block.decompressedSize + 1)
            }
            #expect(throws: FormatError.corruptCompressedData, "lz4/\(block.file): truncated block was accepted") {
                _ = try LZ4Block.decompress(Array(input.dropLast()), size: block.decompressedSize)
            }
        }
        #expect(manifest.rawBlocks.count == 2, "lz4: expected 2 raw blocks")
        print("vectors: lz4/manifest.json raw_blocks consumed=\(manifest.rawBlocks.count) valid=\(manifest.rawBlocks.count) "
            + "invalid=0 acceptable=0 notApplicable=0 (each also refused one byte short, one byte long, truncated)")
    }
}
