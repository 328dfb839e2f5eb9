// Fuzzes the LZ4 decoders: `LZ4Block.decompress` (a chunk's payload) and
// `LZ4Frame.decompress`.
//
// Input: a selector byte, then
//   bit 0 = 0: the decompressed size (u24, at most 4 MiB: the largest
//              chunk), then a raw LZ4 block;
//   bit 0 = 1: LZ4 frames (output limited to 16 MiB).
// Property: whatever decompresses compresses and decompresses back to
// itself.
internal import FuzzSupport
internal import LockerFormat

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8() else { return 0 }
    if selector & 1 == 0 {
        guard let declared = input.uint24() else { return 0 }
        let outputSize = Int(min(declared, 4 << 20))
        let block = input.rest()
        guard let output = try? LZ4Block.decompress(block, size: outputSize) else { return 0 }
        fuzzCheck(output.count == outputSize, "block gave \(output.count) bytes of \(outputSize)")
        var again = [UInt8](repeating: 0, count: LZ4Block.compressBound(output.count))
        let n = output.withUnsafeBytes { i in again.withUnsafeMutableBytes { LZ4Block.compress(i, into: $0) } }
        fuzzCheck(n != nil, "LZ4Block.compress failed on \(output.count) bytes")
        let back = Result { try LZ4Block.decompress(Array(again[..<n!]), size: output.count) }
        fuzzCheck((try? back.get()) == output, "block does not round-trip: \(back)")
    } else {
        let limit = 16 << 20
        guard let output = try? LZ4Frame.decompress(input.rest(), maxOutputSize: limit) else { return 0 }
        fuzzCheck(output.count <= limit, "frame gave \(output.count) bytes, over the limit")
        let back = Result { try LZ4Frame.decompress(try LZ4Frame.compress(output), maxOutputSize: limit) }
        fuzzCheck((try? back.get()) == output, "frame does not round-trip: \(back)")
    }
    return 0
}
