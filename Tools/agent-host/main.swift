// A stand-in for `locker agent` until the CLI has it: runs the agent for
// the device directory in argv[1]. The tests launch it through
// AgentLauncher.
//
//     locker-agent-host DEVICE            run the agent (never returns)
//     locker-agent-host --client DEVICE   connect (starting an agent with
//                                         this program if none answers),
//                                         print "<agent pid> <state>"
import LockerAgent
import LockerDevice
#if canImport(Glibc)
import Glibc
#endif

let arguments = CommandLine.arguments
if arguments.count == 3, arguments[1] == "--client" {
    do {
        let launcher = AgentLauncher(executable: "/proc/self/exe".resolvingLink(), arguments: [arguments[2]])
        let client = try AgentClient(devicePath: arguments[2], launcher: launcher)
        let pid = try client.agentProcessID()
        let state: String
        do {
            state = try client.status().state.rawValue
        } catch DeviceError.notInitialized {
            state = "notInitialized"
        }
        print("\(pid) \(state)")
        exit(0)
    } catch {
        print("error: \(error)")
        exit(1)
    }
}
guard arguments.count == 2 else {
    print("usage: locker-agent-host DEVICE | --client DEVICE")
    exit(64)
}
do {
    try AgentServer.run(devicePath: arguments[1])
} catch {
    print("locker-agent-host: \(error)")
    exit(1)
}

extension String {
    /// The target of the symbolic link at this path (for /proc/self/exe).
    func resolvingLink() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(self, &buffer, buffer.count - 1)
        guard n > 0 else { return self }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
