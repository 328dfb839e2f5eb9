import LockerFormat
import Testing

@Suite struct HexTests {
    @Test("every byte value is two lowercase digits, most significant first")
    func everyByte() {
        let all = (0...255).map { UInt8($0) }
        let expected = all.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        #expect(Hex.lowercase(all) == expected)
        #expect(Hex.lowercase([0x00, 0x0F, 0xF0, 0xAB]) == "000ff0ab")
    }

    @Test("empty input, and a slice, whose indices do not start at zero")
    func emptyAndSlices() {
        #expect(Hex.lowercase([UInt8]()) == "")
        let bytes: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF]
        #expect(Hex.lowercase(bytes[1...2]) == "adbe")
        #expect(Hex.lowercase(bytes.prefix(1)) == "de")
    }
}
