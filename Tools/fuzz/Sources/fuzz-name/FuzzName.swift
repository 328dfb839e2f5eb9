// Fuzzes the encrypted-name decoder (`NameCodec.decode`, under fixed
// metadata keys) and `Base64URL.decode`.
//
// Input: a selector byte (taken modulo 3), then the rest.
//   0: the rest, as UTF-8, is an encoded name in the fixed parent directory
//   1: a parent-ID length byte (modulo 33), the parent ID, then a name's
//      plaintext bytes (any bytes), which the target encodes as the store
//      would before decoding
//   2: the rest, as UTF-8, is base64url text
// Properties: a name that decodes encodes back to the same text; a sealed
// plaintext decodes exactly when it is UTF-8, to itself; base64url that
// decodes encodes back to the same text (one spelling per byte string).
internal import FuzzSupport
internal import LockerFormat

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8() else { return 0 }
    let keys = FuzzKeys.metadata
    switch selector % 3 {
    case 0:
        let encoded = String(decoding: input.rest(), as: UTF8.self)
        guard let name = try? NameCodec.decode(encoded, parentID: FuzzKeys.parentID, keys: keys) else { return 0 }
        let again = Result { try NameCodec.encode(name, parentID: FuzzKeys.parentID, keys: keys) }
        fuzzCheck((try? again.get()) == encoded, "name does not encode back to its text: \(again)")
    case 1:
        guard let n = input.uint8(), let parentID = input.take(Int(n % 33)) else { return 0 }
        let plain = input.rest()
        guard let encoded = try? FuzzSeal.name(plain, parentID: parentID) else { return 0 }
        let decoded = Result { try NameCodec.decode(encoded, parentID: parentID, keys: keys) }
        let expected = String(validating: plain, as: UTF8.self)
        fuzzCheck((try? decoded.get()) == expected, "sealed name decodes to \(decoded), expected \(String(describing: expected))")
    default:
        let text = String(decoding: input.rest(), as: UTF8.self)
        guard let bytes = Base64URL.decode(text) else { return 0 }
        fuzzCheck(Base64URL.encode(bytes) == text, "base64url does not encode back to its text")
    }
    return 0
}
