// Fuzzes the keybag parser (`Keybag.open`, under a fixed seal key) and the
// device record decoder (`DeviceRecord.decode`, under a fixed MAC key).
//
// Input: a selector byte, then the rest.
//   bit 0: 0 = keybag, 1 = device record
//   bit 1: 0 = the rest is the file as stored;
//          1 = the rest is the body, which the target seals (keybag) or
//              follows with its MAC (device record) first
// Property: a keybag that opens seals again and opens to an equal value; a
// device record that decodes encodes back to the very same bytes.
internal import FuzzSupport
internal import LockerFormat

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8() else { return 0 }
    let rest = input.rest()
    let sealed = selector & 2 != 0
    if selector & 1 == 0 {
        let key = FuzzKeys.keybagSealKey
        let file: [UInt8]? = sealed ? (try? FuzzSeal.envelope(magic: Keybag.magic, body: rest, key: key)) : rest
        guard let file, let keybag = try? Keybag.open(file, with: key)
        else { return 0 }
        let again = Result { try Keybag.open(try keybag.sealed(with: key), with: key) }
        fuzzCheck((try? again.get()) == keybag, "keybag does not round-trip: \(again)")
    } else {
        let key = FuzzKeys.deviceMACKey
        let file: [UInt8]? = sealed ? (try? FuzzSeal.deviceRecord(body: rest)) : rest
        guard let file, let record = try? DeviceRecord.decode(file, macKey: key)
        else { return 0 }
        let again = Result { try record.encoded(macKey: key) }
        fuzzCheck((try? again.get()) == file, "device record does not encode back to its bytes: \(again)")
    }
    return 0
}
