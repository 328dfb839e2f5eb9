import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

@Suite struct StoreSmokeTests {
    @Test func putGetRoundTrip() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10))
        for size in [0, 1, 16383, 16384, 16385, 3 * 16384 + 7, 1 << 20] {
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 / 7) }
            var offset = 0
            try store.put(StorePath("/a/b/obj\(size)"), protection: .complete) { buffer in
                let n = min(buffer.count, data.count - offset)
                buffer.copyBytes(from: data[offset..<(offset + n)])
                offset += n
                return n
            }
            var out: [UInt8] = []
            try store.read(StorePath("/a/b/obj\(size)")) { out.append(contentsOf: $0) }
            #expect(out == data, "size \(size)")
            if size > 100 {
                var part: [UInt8] = []
                try store.read(StorePath("/a/b/obj\(size)"), range: 50..<UInt64(size - 3)) { part.append(contentsOf: $0) }
                #expect(part == Array(data[50..<(size - 3)]))
            }
        }
        #expect(try store.list(StorePath("/a/b")).count == 7)
    }
}
