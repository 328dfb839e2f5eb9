import LockerFormat
import Testing

// LZ4Block round trips over sizes 0, 1, 2, 100 and 65536 on compressible
// and random data.
//
// Size 0 is a deliberate edge: compress never "compresses" an empty input
// (it returns nil, so the caller stores it raw) and decompress refuses an
// empty output, so no empty block can ever be produced or accepted.

enum BlockData: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case compressible
    case random

    var testDescription: String { rawValue }

    func bytes(_ count: Int) -> [UInt8] {
        switch self {
        case .compressible:
            let line = Array("locker block round trip, locker block round trip\n".utf8)
            return (0..<count).map { line[$0 % line.count] }
        case .random:
            // SplitMix64: deterministic, and incompressible for LZ4.
            var state: UInt64 = 0x9e37_79b9_7f4a_7c15 &* UInt64(count + 1)
            var out: [UInt8] = []
            out.reserveCapacity(count + 8)
            while out.count < count {
                state &+= 0x9e37_79b9_7f4a_7c15
                var z = state
                z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
                z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
                z ^= z >> 31
                withUnsafeBytes(of: z.littleEndian) { out.append(contentsOf: $0) }
            }
            return Array(out.prefix(count))
        }
    }
}

@Suite("LZ4Block round trips")
struct LZ4BlockRoundTripTests {
    @Test("round trip", arguments: [0, 1, 2, 100, 65536], BlockData.allCases)
    func roundTrip(size: Int, kind: BlockData) throws {
        let input = kind.bytes(size)
        #expect(input.count == size)
        let label = "\(kind.rawValue) \(size) bytes"

        if size == 0 {
            var out = [UInt8](repeating: 0, count: LZ4Block.compressBound(0))
            let n = input.withUnsafeBytes { i in out.withUnsafeMutableBytes { LZ4Block.compress(i, into: $0) } }
            #expect(n == nil, "\(label): an empty input was compressed")
            #expect(LZ4Block.compress(input) == nil, "\(label): an empty input was compressed")
            #expect(throws: FormatError.corruptCompressedData, "\(label): an empty block was accepted") {
                _ = try LZ4Block.decompress([0], size: 0)
            }
            return
        }

        // With a worst-case buffer, compression always succeeds.
        var out = [UInt8](repeating: 0, count: LZ4Block.compressBound(size))
        let n = try #require(input.withUnsafeBytes { i in out.withUnsafeMutableBytes { LZ4Block.compress(i, into: $0) } },
                             "\(label): compress into compressBound bytes failed")
        let block = Array(out.prefix(n))
        #expect(try LZ4Block.decompress(block, size: size) == input, "\(label): round trip differs")
        #expect(throws: FormatError.corruptCompressedData, "\(label): one byte short was accepted") {
            _ = try LZ4Block.decompress(block, size: size - 1)
        }
        #expect(throws: FormatError.corruptCompressedData, "\(label): one byte long was accepted") {
            _ = try LZ4Block.decompress(block, size: size + 1)
        }

        // With an output smaller than the input, random data never fits.
        var small = [UInt8](repeating: 0, count: size - 1)
        let smallResult = input.withUnsafeBytes { i in small.withUnsafeMutableBytes { LZ4Block.compress(i, into: $0) } }
        let convenience = LZ4Block.compress(input)
        switch kind {
        case .random:
            #expect(smallResult == nil, "\(label): random data 'compressed' into fewer bytes")
            #expect(convenience == nil, "\(label): random data 'compressed' into fewer bytes")
            #expect(n > size, "\(label): random data shrank")
        case .compressible where size >= 100:
            let packed = try #require(convenience, "\(label): compressible data did not shrink")
            #expect(packed.count < size)
            #expect(packed == block, "\(label): the two compress entry points disagree")
            #expect(try LZ4Block.decompress(packed, size: size) == input, "\(label): round trip differs")
        case .compressible:
            // 1 or 2 bytes cannot shrink (a block needs a token byte).
            #expect(convenience == nil, "\(label): a tiny input 'shrank'")
            #expect(smallResult == nil, "\(label): a tiny input 'shrank'")
        }
    }

    @Test("garbage blocks throw, never crash")
    func garbage() {
        let patterns: [[UInt8]] = [
            [], [0xff], [0xf0], [0xff, 0xff, 0xff, 0xff], [0x00, 0x00],
            [0x10, 0x41, 0x05, 0x00, 0x00], // a match offset before the start of the output
            [UInt8](repeating: 0xff, count: 300),
        ]
        for pattern in patterns {
            for size in [1, 16, 1000] {
                #expect(throws: FormatError.self, "pattern \(pattern.prefix(8)) size \(size)") {
                    _ = try LZ4Block.decompress(pattern, size: size)
                }
            }
        }
    }
}
