// Fuzzes the agent protocol's payload decoders through `AgentWire`: the
// request decoder the agent runs on every frame it reads, and the reply
// decoder the client runs (error codes, events).
//
// Input: a selector byte, then a frame's payload.
//   bit 0: 0 = request (client to agent), 1 = reply (agent to client)
// Property: a payload that decodes encodes back to the same bytes, except
// an error of a type the protocol cannot carry (code 0xFF), which by design
// comes back under its own type's name.
internal import FuzzSupport
internal import LockerAgent

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8() else { return 0 }
    let payload = input.rest()
    if selector & 1 == 0 {
        guard let again = try? AgentWire.decodeRequest(payload) else { return 0 }
        fuzzCheck(again == payload, "request does not encode back to its bytes")
    } else {
        guard let again = try? AgentWire.decodeReply(payload) else { return 0 }
        let isUncarried = payload.count >= 2 && payload[0] == 0x01 && payload[1] == 0xFF
        fuzzCheck(isUncarried || again == payload, "reply does not encode back to its bytes")
    }
    return 0
}
