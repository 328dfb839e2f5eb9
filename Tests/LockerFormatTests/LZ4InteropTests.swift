import Foundation
import LockerFormat
import Testing

// Our frames must be readable by the reference tool. The other direction
// (frames made by the reference tool decode with ours) is covered by the
// vector frames in LZ4FrameVectorTests.

@Suite("LZ4 interop with the reference lz4 tool")
struct LZ4InteropTests {
    static let tool = "/usr/bin/lz4"

    /// Runs `/usr/bin/lz4 -d -c FILE` and returns its stdout.
    static func referenceDecode(_ file: URL) throws -> (status: Int32, stdout: [UInt8], stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = ["-d", "-c", file.path]
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read stdout to the end before waiting, so a large output cannot
        // fill the pipe and block the child.
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        try? out.fileHandleForReading.close()
        try? err.fileHandleForReading.close()
        process.waitUntilExit()
        return (process.terminationStatus, [UInt8](stdout), String(decoding: stderr, as: UTF8.self))
    }

    @Test("LZ4Frame.compress output decodes with the reference lz4 -d")
    func ourFramesDecodeWithReference() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.tool) else {
            Issue.record("\(Self.tool) is missing: install the `lz4` package (for example `apt-get install lz4`) to run the LZ4 interop test")
            return
        }
        let inputs = try LZ4Vectors.listing("inputs")
        #expect(inputs.count == 6, "lz4/inputs: expected 6 files")
        let scratch = FileManager.default.temporaryDirectory
            .appendingPathComponent("locker-lz4-interop-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }

        var checked = 0
        for name in inputs {
            let input = try LZ4Vectors.bytes(name)
            let frame = try LZ4Frame.compress(input)
            // Our own decoder agrees too.
            #expect(try LZ4Frame.decompress(frame) == input, "lz4/\(name): our round trip failed")
            let file = scratch.appendingPathComponent(URL(fileURLWithPath: name).lastPathComponent + ".lz4")
            try Data(frame).write(to: file)
            let result = try Self.referenceDecode(file)
            #expect(result.status == 0, "lz4/\(name): lz4 -d exited \(result.status): \(result.stderr)")
            #expect(result.stdout.count == input.count,
                    "lz4/\(name): lz4 -d wrote \(result.stdout.count) bytes, expected \(input.count)")
            #expect(result.stdout == input, "lz4/\(name): lz4 -d output differs from the input")
            checked += 1
        }
        print("vectors: lz4 interop ours->reference consumed=\(inputs.count) matched=\(checked)")
    }
}
