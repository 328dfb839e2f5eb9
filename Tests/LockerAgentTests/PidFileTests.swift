import Foundation
@testable import LockerAgent
import Testing

@Suite("The agent's pid file, as clients and agents read it")
struct PidFileTests {
    @Test("one decimal number above zero, white space around it at most")
    func readsOnlyAPid() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pid-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cases: [(String, Int32?)] = [
            ("123\n", 123), ("  45 \t\n", 45), ("2147483647", Int32.max),
            ("0\n", nil), ("-3\n", nil), ("12 34\n", nil), ("12a\n", nil), ("abc", nil), ("", nil), ("\n", nil),
            ("2147483648\n", nil), (String(repeating: "1", count: 100), nil),
        ]
        for (index, (text, expected)) in cases.enumerated() {
            let path = directory + "/\(index)"
            #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            #expect(AgentPaths.pid(inFile: path) == expected, "\(text.debugDescription)")
        }
        #expect(AgentPaths.pid(inFile: directory + "/missing") == nil)
        #expect(AgentPaths.pid(inFile: directory) == nil, "a directory")
    }
}
