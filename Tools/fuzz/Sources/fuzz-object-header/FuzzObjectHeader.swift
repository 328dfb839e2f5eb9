// Fuzzes the object header and directory record parsers
// (`ObjectHeader.open`, `DirectoryRecord.open`) under fixed metadata keys.
//
// Input: a selector byte, then the rest.
//   bit 0: 0 = object header, 1 = directory record
//   bit 1: 0 = the rest is a record file as stored (envelope included);
//          1 = the rest is a record body, which the target seals first so
//              that the body parser sees it
//   bit 2 (object headers, with bit 1): the rest is a u16 body length, the
//          body and inline data; the target seals the body as an `LKOI`
//          record with its length and appends the data, so that the
//          inline form's checks see it
// Property: whatever opens seals again and opens to an equal value.
internal import FuzzSupport
internal import LockerFormat

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8() else { return 0 }
    let isDirectory = selector & 1 == 1
    let magic = isDirectory ? DirectoryRecord.magic : ObjectHeader.magic
    let rest = input.rest()
    let keys = FuzzKeys.metadata
    let file: [UInt8]
    if selector & 2 == 0 {
        file = rest
    } else if !isDirectory && selector & 4 != 0 {
        guard rest.count >= 2 else { return 0 }
        let bodyLength = min(rest.count - 2, Int(rest[0]) << 8 | Int(rest[1]))
        let body = Array(rest[2..<(2 + bodyLength)])
        let length = 8 + 12 + body.count + 16
        guard length <= 0xffff,
              let sealed = try? FuzzSeal.envelope(magic: ObjectHeader.inlineMagic, body: body, key: keys.recordKey,
                                                  field: UInt16(length))
        else { return 0 }
        file = sealed + rest[(2 + bodyLength)...]
    } else {
        guard let sealed = try? FuzzSeal.envelope(magic: magic, body: rest, key: keys.recordKey) else { return 0 }
        file = sealed
    }
    if isDirectory {
        guard let record = try? DirectoryRecord.open(file, with: keys) else { return 0 }
        let again = Result { try DirectoryRecord.open(try record.sealed(with: keys), with: keys) }
        fuzzCheck((try? again.get()) == record, "directory record does not round-trip: \(again)")
    } else {
        guard let header = try? ObjectHeader.open(file, with: keys) else { return 0 }
        let again = Result { try ObjectHeader.open(try header.sealed(with: keys), with: keys) }
        fuzzCheck((try? again.get()) == header, "object header does not round-trip: \(again)")
    }
    return 0
}
