internal import LockerFormat

/// The agent protocol's decoders, reachable from outside the module for
/// the fuzz targets in Tools/fuzz and for nothing else (apps use
/// ``AgentClient``). Each call is a thin wrapper over the decoder the agent
/// or the client runs on a frame's payload, and hands back what it decoded
/// encoded again, so that a fuzz target can check the round trip.
public enum AgentWire {
    /// Decodes a request payload as the agent does (`AgentRequest.decode`)
    /// and returns the request encoded again, as the client sends it.
    /// Throws on anything the agent refuses.
    public static func decodeRequest(_ payload: [UInt8]) throws -> [UInt8] {
        try AgentRequest.decode(payload).encoded()
    }

    /// Decodes a response payload as the client does, and returns it
    /// encoded again: an error frame through `WireFormat.decodeError` and
    /// `WireFormat.encodeError`, an event frame through
    /// `WireFormat.event(code:)`. The body of an OK or continuation frame
    /// depends on the request, so it is returned as it is. Throws on
    /// anything the client refuses.
    public static func decodeReply(_ payload: [UInt8]) throws -> [UInt8] {
        var r = ByteReader(payload)
        let kind = try r.readUInt8()
        switch WireFormat.ResponseKind(rawValue: kind) {
        case .ok, .continuation:
            return payload
        case .error:
            return WireFormat.encodeError(try WireFormat.decodeError(&r))
        case .event:
            let event = try WireFormat.event(code: try r.readUInt8())
            try r.expectEnd()
            return [kind, WireFormat.eventCode(event)]
        case nil:
            throw WireFormat.Malformed()
        }
    }
}
