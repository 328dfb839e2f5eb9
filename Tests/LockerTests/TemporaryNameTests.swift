@testable import LockerStore
import Testing

/// Which namespace entries a listing takes for writes in progress.
@Suite struct TemporaryNameTests {
    @Test("a name with .tmp- anywhere is a write in progress, and no other is", arguments: [
        ("abc.tmp-123", true), (".tmp-dir-x", true), ("a..tmp-", true), ("é.tmp-z", true), (".tmp-", true),
        ("abc", false), ("", false), ("a.tmp", false), ("a.tm-p", false), ("..tmp", false), ("tmp-", false),
        ("a.TMP-1", false), ("AbC-_09", false),
    ])
    func isTemporary(name: String, expected: Bool) {
        #expect(Store.isTemporary(name) == expected)
    }
}
