import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

/// The table of open objects is bounded: a new object ID beyond
/// `Device.maxOpenObjects` is refused, an ID already open is not counted
/// again, and a close makes room.
@Suite struct OpenObjectLimitTests {
    @Test func theTableHoldsAtMostMaxOpenObjects() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        let limit = Device.maxOpenObjects
        let fileKey = try SecretBytes(randomCount: 32)
        for i in 0..<limit {
            try device.registerOpen(objectID: "object-\(i)", fileKey: fileKey, protectionClass: .none)
        }
        let wrapped = try device.wrap(fileKey: fileKey, for: .none)
        #expect(throws: DeviceError.tooManyOpenObjects(limit: limit)) {
            try device.registerOpen(objectID: "one more", fileKey: fileKey, protectionClass: .none)
        }
        #expect(throws: DeviceError.tooManyOpenObjects(limit: limit)) { try device.open(objectID: "one more", wrapped: wrapped) }
        #expect(throws: DeviceError.notOpen) { try device.openFileKey(objectID: "one more") }
        #expect(try device.status().openObjects.count == limit)

        // An object already open is opened again in its place.
        let other = try SecretBytes(randomCount: 32)
        try device.registerOpen(objectID: "object-7", fileKey: other, protectionClass: .completeUnlessOpen)
        #expect(try device.openFileKey(objectID: "object-7") == other)
        #expect(try device.open(objectID: "object-8", wrapped: wrapped) == fileKey)
        let status = try device.status()
        #expect(status.openObjects.count == limit)
        #expect(status.openObjects.first { $0.id == "object-7" }?.protection == "completeUnlessOpen")

        // A close makes room for one more, and only one.
        try device.close(objectID: "object-0")
        #expect(try device.open(objectID: "one more", wrapped: wrapped) == fileKey)
        #expect(throws: DeviceError.tooManyOpenObjects(limit: limit)) {
            try device.registerOpen(objectID: "and another", fileKey: fileKey, protectionClass: .none)
        }
    }
}
