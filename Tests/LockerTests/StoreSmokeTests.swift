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

    /// Bytes LZ4 cannot compress (xorshift64), so that chunk records sit at
    /// fixed offsets in the data file.
    static func noise(_ count: Int) -> [UInt8] {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        return (0..<count).map { _ in
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            return UInt8(truncatingIfNeeded: x >> 32)
        }
    }

    /// The pieces a positioned read hands over, from whichever thread.
    final class Pieces: @unchecked Sendable {
        private let lock = NSLock()
        private var pieces: [(offset: UInt64, bytes: [UInt8])] = []

        func add(_ offset: UInt64, _ bytes: UnsafeRawBufferPointer) {
            lock.withLock { pieces.append((offset, Array(bytes))) }
        }

        var all: [(offset: UInt64, bytes: [UInt8])] { lock.withLock { pieces.sorted { $0.offset < $1.offset } } }
    }

    /// `read(_:range:at:)` hands over every byte of the range exactly once,
    /// each at its offset, for objects inline and in a data file, and on a
    /// damaged chunk throws an integrity error having handed over only
    /// true bytes.
    @Test func positionedReadCoversTheRangeOnce() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let chunk = 16 << 10
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: UInt32(chunk), workers: 2))
        for size in [0, 1, chunk - 1, chunk, 20 * chunk + 5, 90 * chunk + 11] {
            let data = Self.noise(size)
            var offset = 0
            let path = try StorePath("/p/obj\(size)")
            try store.put(path, protection: .complete) { buffer in
                let n = min(buffer.count, data.count - offset)
                buffer.copyBytes(from: data[offset..<(offset + n)])
                offset += n
                return n
            }
            var ranges: [Range<Int>] = [0..<size]
            if size > 2 { ranges += [1..<(size - 1), (size - 1)..<size] }
            if size > 3 * chunk { ranges += [(chunk - 1)..<(chunk + 1), (chunk / 2)..<(3 * chunk + 7), (2 * chunk)..<(3 * chunk)] }
            for range in ranges {
                let pieces = Pieces()
                try store.read(path, range: UInt64(range.lowerBound)..<UInt64(range.upperBound)) { pieces.add($0, $1) }
                var next: UInt64 = 0
                var joined: [UInt8] = []
                for piece in pieces.all {
                    #expect(piece.offset == next, "size \(size) range \(range): a gap or overlap at \(piece.offset)")
                    next = piece.offset + UInt64(piece.bytes.count)
                    joined += piece.bytes
                }
                #expect(joined == Array(data[range]), "size \(size) range \(range)")
            }
        }

        // Damage in chunk 40 of 91: an integrity error, and every byte
        // handed over before it is the object's own.
        let size = 90 * chunk + 11
        let truth = Self.noise(size)
        let header = try store.stat(try StorePath("/p/obj\(size)"))
        guard case .object(let info) = header.kind else {
            Issue.record("not an object")
            return
        }
        #expect(info.chunks == 91)
        let dataDirectory = root + "/s/data"
        var damaged: String?
        for name in try FileManager.default.contentsOfDirectory(atPath: dataDirectory) {
            let attributes = try FileManager.default.attributesOfItem(atPath: dataDirectory + "/" + name)
            if (attributes[.size] as? Int ?? 0) > 90 * chunk { damaged = dataDirectory + "/" + name }
        }
        let file = try #require(damaged)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[40 * (chunk + 17) + 100] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: file))
        let pieces = Pieces()
        #expect {
            try store.read(try StorePath("/p/obj\(size)")) { pieces.add($0, $1) }
        } throws: { error in
            if case StoreError.integrity = error { return true }
            return false
        }
        for piece in pieces.all {
            #expect(piece.bytes == Array(truth[Int(piece.offset)..<(Int(piece.offset) + piece.bytes.count)]))
            #expect(piece.offset != UInt64(40 * chunk), "the damaged chunk was handed over")
        }
    }
}
