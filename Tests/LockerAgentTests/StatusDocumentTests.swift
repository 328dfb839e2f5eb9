import Foundation
@testable import LockerAgent
@testable import LockerDevice
import Testing

@Suite("The status document, written without Foundation")
struct StatusDocumentTests {
    static func status(
        state: DeviceState = .unlocked, ids: [String] = [], graceRemaining: Double? = nil,
        nextAttemptAllowedAt: Double? = nil, eraseAfter: Int? = nil, defaultClass: String = "completeUntilFirstUserAuthentication"
    ) -> DeviceStatus {
        DeviceStatus(
            state: state, passcodeSet: true,
            readableClasses: ["complete", "none"], creatableClasses: [],
            graceRemaining: graceRemaining, graceSeconds: 10, failedAttempts: 3,
            nextAttemptAllowedAt: nextAttemptAllowedAt, eraseAfter: eraseAfter, keyGeneration: 7,
            defaultClass: defaultClass,
            openObjects: ids.map { DeviceStatus.OpenObject(id: $0, protection: "completeUnlessOpen") },
            isProtectedDataAvailable: state == .unlocked)
    }

    /// Strings that need each kind of escape, and some that need none.
    static let awkwardIDs = [
        "plain", "", "quote\"in", "back\\slash", "slash/es", "nul\u{0}byte", "\u{1}\u{1f}\u{7f}",
        "tab\tnew\nline\rcr", "back\u{8}space form\u{c}feed", "é ü ß", "emoji 🗝️", "line\u{2028}separator", "\u{FFFD}",
        String(repeating: "\u{1}", count: 1024),
    ]

    @Test("JSONDecoder reads back every field, for every kind of value")
    func decodesBack() throws {
        let statuses = [
            Self.status(),
            Self.status(state: .locking, ids: Self.awkwardIDs, graceRemaining: 2.5),
            Self.status(state: .locked, nextAttemptAllowedAt: 1_764_369_600.25, eraseAfter: 10),
            Self.status(state: .beforeFirstUnlock, graceRemaining: 3, nextAttemptAllowedAt: 1e-5, eraseAfter: 0),
            Self.status(state: .wiped, graceRemaining: 1.7e20, nextAttemptAllowedAt: 0.1, defaultClass: "none"),
        ]
        for status in statuses {
            let document = try StatusDocument.encode(status)
            let decoded = try JSONDecoder().decode(DeviceStatus.self, from: Data(document))
            #expect(decoded == status, "\(String(decoding: document, as: UTF8.self))")
        }
    }

    @Test("the same bytes as JSONEncoder with sorted keys")
    func sameAsJSONEncoder() throws {
        let encoder = JSONEncoder()
        // JSONEncoder also escapes "/", which JSON allows and does not need.
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let statuses = [
            Self.status(),
            Self.status(state: .locking, ids: Self.awkwardIDs, graceRemaining: 2.5, eraseAfter: 5),
            Self.status(state: .locked, graceRemaining: 4, nextAttemptAllowedAt: 1_764_369_600.25),
        ]
        for status in statuses {
            let ours = String(decoding: try StatusDocument.encode(status), as: UTF8.self)
            let theirs = String(decoding: try encoder.encode(status), as: UTF8.self)
            #expect(ours == theirs)
        }
    }

    @Test("a time JSON cannot carry is refused, not written")
    func nonFiniteRefused() {
        for value in [Double.infinity, -Double.infinity, Double.nan] {
            #expect(throws: AgentError.self) { try StatusDocument.encode(Self.status(graceRemaining: value)) }
            #expect(throws: AgentError.self) { try StatusDocument.encode(Self.status(nextAttemptAllowedAt: value)) }
        }
    }
}
