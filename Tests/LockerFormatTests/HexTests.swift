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

    @Test("empty input, one byte, and a 16-byte object ID")
    func emptyAndShort() {
        #expect(Hex.lowercase([]) == "")
        #expect(Hex.lowercase([0xDE]) == "de")
        #expect(Hex.lowercase([0xDE, 0xAD, 0xBE, 0xEF] + [UInt8](repeating: 0x01, count: 12)) == "deadbeef" + String(repeating: "01", count: 12))
    }
}
