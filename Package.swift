// swift-tools-version: 6.2
import PackageDescription

// Every Swift target gets the same settings: Swift 6 mode, every warning an
// error, and the upcoming-feature flags that keep imports honest.
let strictSwift: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Locker",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "LockerCrypto", targets: ["LockerCrypto"]),
        .library(name: "LockerFormat", targets: ["LockerFormat"]),
        .library(name: "LockerStore", targets: ["LockerStore"]),
        .library(name: "Locker", targets: ["Locker"]),
        .executable(name: "locker", targets: ["locker"]),
        .executable(name: "locker-agent", targets: ["locker-agent"]),
        .executable(name: "locker-agent-host", targets: ["agent-host"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // C layer: thin system-library modules and one small C target for
        // what Swift cannot call directly (variadic functions).
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .target(name: "CLockerSupport"),

        // Crypto: the only importer of COpenSSL.
        .target(name: "LockerCrypto", dependencies: ["COpenSSL"]),
        // Formats: bytes in, bytes out, no I/O. The only importer of CLZ4.
        .target(name: "LockerFormat", dependencies: ["LockerCrypto", "CLZ4"]),
        // The one layer that makes file system calls for the store and the
        // device.
        .target(name: "LockerIO", dependencies: ["CLockerSupport"]),
        // The simulated device: keybag, passcode policy, state machine.
        .target(name: "LockerDevice", dependencies: ["LockerCrypto", "LockerFormat", "LockerIO"]),
        // The store: namespace, objects, chunk pipeline. Uses
        // FoundationEssentials only, never the whole of Foundation.
        .target(name: "LockerStore", dependencies: ["LockerCrypto", "LockerFormat", "LockerIO", "LockerDevice"]),
        // The module apps import: the store under Foundation's names
        // (`FileManager`-style calls, `FileProtectionType`). Their
        // `NSNumber` and `ObjCBool` need the whole of Foundation, so the
        // command line does not link this module.
        .target(name: "Locker", dependencies: ["LockerStore", "LockerFormat", "LockerDevice"]),
        // The agent: holds a booted device for the CLI, over a Unix socket.
        .target(
            name: "LockerAgent",
            dependencies: ["LockerDevice", "LockerFormat", "LockerCrypto", "LockerIO", "CLockerSupport"]
        ),
        // The agent that `locker` starts beside itself, without the
        // command line's parser and Foundation (docs/architecture.md,
        // "The agent executable").
        .executableTarget(name: "locker-agent", dependencies: ["LockerAgent"]),
        // Runs the agent until the CLI has an `agent` command; the agent
        // tests launch it.
        .executableTarget(name: "agent-host", dependencies: ["LockerAgent", "LockerDevice"], path: "Tools/agent-host"),

        .executableTarget(
            name: "locker",
            dependencies: [
                "LockerCrypto", "LockerFormat", "LockerIO", "LockerDevice", "LockerAgent", "LockerStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // Measures the chunk pipeline at each chunk size.
        .executableTarget(
            name: "chunk-bench",
            dependencies: ["LockerStore", "LockerDevice", "LockerFormat", "LockerCrypto"],
            path: "Tools/chunk-bench"
        ),

        // Writes the damage corpus's example device and store
        // (Tests/LockerCLITests/DamageCorpus/README.md).
        .executableTarget(
            name: "corpus-gen",
            dependencies: ["LockerStore", "LockerDevice", "LockerFormat", "LockerCrypto"],
            path: "Tools/corpus-gen"
        ),

        // libFuzzer targets for the decoders (Tools/fuzz/README.md). Run
        // with Tools/fuzz/run.sh, which builds each with
        // `--sanitize=fuzzer`; a plain build links them as executables that
        // do nothing, so that they keep compiling.
        .target(name: "FuzzSupport", dependencies: ["LockerFormat", "LockerCrypto"], path: "Tools/fuzz/Sources/FuzzSupport"),
        .executableTarget(name: "fuzz-object-header", dependencies: ["FuzzSupport", "LockerFormat"],
                          path: "Tools/fuzz/Sources/fuzz-object-header"),
        .executableTarget(name: "fuzz-chunk-stream", dependencies: ["FuzzSupport", "LockerFormat", "LockerCrypto"],
                          path: "Tools/fuzz/Sources/fuzz-chunk-stream"),
        .executableTarget(name: "fuzz-lz4", dependencies: ["FuzzSupport", "LockerFormat"], path: "Tools/fuzz/Sources/fuzz-lz4"),
        .executableTarget(name: "fuzz-keybag", dependencies: ["FuzzSupport", "LockerFormat"], path: "Tools/fuzz/Sources/fuzz-keybag"),
        .executableTarget(name: "fuzz-name", dependencies: ["FuzzSupport", "LockerFormat"], path: "Tools/fuzz/Sources/fuzz-name"),
        .executableTarget(name: "fuzz-agent-wire", dependencies: ["FuzzSupport", "LockerAgent"],
                          path: "Tools/fuzz/Sources/fuzz-agent-wire"),
        // Writes Tools/fuzz/corpus.
        .executableTarget(name: "fuzz-seeds", dependencies: ["FuzzSupport", "LockerAgent", "LockerFormat", "LockerCrypto"],
                          path: "Tools/fuzz/Sources/fuzz-seeds"),

        .testTarget(
            name: "LockerCryptoTests",
            dependencies: ["LockerCrypto"],
            resources: [.copy("Vectors")]
        ),
        .testTarget(
            name: "LockerTests",
            dependencies: ["Locker", "LockerStore", "LockerDevice", "LockerFormat", "LockerCrypto", "LockerIO", "CLockerSupport"]
        ),
        .testTarget(
            name: "LockerDeviceTests",
            dependencies: ["LockerDevice", "LockerFormat", "LockerCrypto", "LockerIO"]
        ),
        .testTarget(
            name: "LockerAgentTests",
            dependencies: ["LockerAgent", "LockerDevice", "LockerFormat", "LockerCrypto"]
        ),
        .testTarget(
            name: "LockerFormatTests",
            dependencies: ["LockerFormat", "LockerCrypto"],
            resources: [.copy("Vectors")]
        ),
        // End-to-end: runs the built `locker` binary (the dependency only
        // makes SwiftPM build it first) against a real agent.
        // The damage corpus (DamageCorpus/, read from the source tree) is
        // also run through the library, hence the library dependencies;
        // LockerAgent's requests fill the agent's limits as another
        // program of the user could.
        .testTarget(
            name: "LockerCLITests",
            dependencies: [
                .target(name: "locker"), .target(name: "locker-agent"),
                "LockerStore", "LockerAgent", "LockerDevice", "LockerFormat", "LockerCrypto",
            ],
            exclude: ["DamageCorpus"]
        ),
        // Crash atomicity: SIGKILLs `locker` at random points of put, rm,
        // mv, setclass, passwd and reset, then checks the store and the
        // device. LOCKER_CRASH_RUNS sets the number of runs (the default is
        // a bounded share; the full campaign is 1,000), LOCKER_CRASH_SEED
        // the seed. See Tests/LockerCrashTests/CrashTests.swift.
        .testTarget(name: "LockerCrashTests", dependencies: [.target(name: "locker"), .target(name: "locker-agent")]),
    ]
)

for target in package.targets where target.type != .system {
    guard !target.name.hasPrefix("C") else { continue }
    target.swiftSettings = (target.swiftSettings ?? []) + strictSwift
}
