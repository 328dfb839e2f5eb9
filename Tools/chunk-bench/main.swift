// Measures store put and get throughput for each allowed chunk size, so
// that the default chunk size rests on a measurement (docs/performance.md).
//
//     locker-chunk-bench [MiB per object] [runs]
//
// Uses an in-process device and a store in a temporary directory; the
// input comes from memory and the output goes to a discarding sink, so
// the figures are the chunk pipeline plus the data file's I/O.
import Foundation
import LockerStore
import LockerCrypto
import LockerDevice
import LockerFormat

let mib = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 128 : 128
let runs = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 5 : 5
let size = mib << 20

/// Text-like data: lines of words from a fixed vocabulary, compressible by
/// LZ4 roughly as ordinary text is.
func textData(_ count: Int) -> [UInt8] {
    let words = ["protection", "class", "keybag", "device", "the", "a", "of", "unlock", "chunk", "object",
                 "store", "passcode", "grace", "period", "and", "to", "data", "file", "key", "wrap"]
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    var out: [UInt8] = []
    out.reserveCapacity(count)
    while out.count < count {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        out.append(contentsOf: words[Int(state >> 59) % words.count].utf8)
        out.append(state & 0x700 == 0 ? 10 : 32)
    }
    return Array(out.prefix(count))
}

func randomData(_ count: Int) -> [UInt8] {
    (try? SecureRandom.bytes(count)) ?? []
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

let root = NSTemporaryDirectory() + "locker-chunk-bench-" + UUID().uuidString.prefix(8)
defer { try? FileManager.default.removeItem(atPath: root) }
let device = try Device.initialize(at: DeviceDirectory(path: root + "/device"), passcode: nil,
                                   options: .init(passcodeCost: .fixed(logN: 10)))
let datasets: [(String, [UInt8])] = [("text", textData(size)), ("random", randomData(size))]
print("object \(mib) MiB, \(runs) runs, medians in MB/s (min-max)")
print("chunk     dataset  put MB/s            get MB/s            stored/plain")
for shift in 16...21 {
    let chunk = UInt32(1) << UInt32(shift)
    let store = try Store(path: root + "/store-\(chunk)", keys: device, options: .init(chunkSize: chunk))
    for (name, data) in datasets {
        var puts: [Double] = []
        var gets: [Double] = []
        var stored: UInt64 = 0
        for run in 0...runs {
            var offset = 0
            let start = ContinuousClock.now
            let info = try store.put(StorePath("/bench/\(name)"), protection: .completeUntilFirstUserAuthentication) { buffer in
                let n = min(buffer.count, data.count - offset)
                data.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + n)])) }
                offset += n
                return n
            }
            let putTime = ContinuousClock.now - start
            stored = info.storedSize
            var received = 0
            let getStart = ContinuousClock.now
            try store.read(StorePath("/bench/\(name)")) { received += $0.count }
            let getTime = ContinuousClock.now - getStart
            precondition(received == data.count, "short read")
            if run == 0 { continue }  // warm-up
            func rate(_ d: Duration) -> Double {
                Double(data.count) / 1e6 / (Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
            }
            puts.append(rate(putTime))
            gets.append(rate(getTime))
        }
        func cell(_ v: [Double]) -> String {
            String(format: "%7.0f (%4.0f-%4.0f)", median(v), v.min()!, v.max()!)
        }
        print(String(format: "%-9@ %-8@ %@   %@   %.3f", "\(chunk >> 10) KiB" as NSString, name as NSString,
                     cell(puts) as NSString, cell(gets) as NSString, Double(stored) / Double(data.count)))
    }
}
