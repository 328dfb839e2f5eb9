import ArgumentParser
import FoundationEssentials
import Glibc
import LockerStore

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the store: every directory, name and object header; with --read-data, every chunk of every object readable now.",
        discussion: "Exits 65 and names each damaged object and why. Objects whose class is locked are reported as not checked. --repair removes only what is provably garbage: temporary files of interrupted writes and data files that no header references and no live process is writing; while another command is storing a batch of objects, header temporaries are left for a later run.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Flag(help: "Authenticate every chunk of every object whose class is readable now.")
    var readData = false

    @Flag(help: "Remove garbage left by interrupted writes.")
    var repair = false

    struct Report: Encodable {
        var clean: Bool
        var directoriesChecked: Int
        var objectsChecked: Int
        var objectsReadInFull: Int
        var damaged: [[String: String]]
        var notChecked: [[String: String]]
        var garbage: [String]
        var removed: [String]
    }

    func run() throws {
        let store = try global.openStore()
        let bar = Progress(total: nil, threshold: 0)
        let report = try store.verify(readData: readData, repair: repair) { done, total in
            if isatty(STDERR_FILENO) == 1 {
                writeToStandardError("\rreading data: \(done)/\(total) objects")
            }
        }
        bar.finish()
        if output.json {
            try printJSON(Report(
                clean: report.isClean, directoriesChecked: report.directoriesChecked, objectsChecked: report.objectsChecked,
                objectsReadInFull: report.objectsReadInFull,
                damaged: report.damaged.map { ["path": $0.location, "reason": $0.reason] },
                notChecked: report.notChecked.map { ["path": $0.location, "reason": $0.reason] },
                garbage: report.garbage, removed: report.removed))
        } else {
            print("Checked \(report.directoriesChecked) director\(report.directoriesChecked == 1 ? "y" : "ies") and \(report.objectsChecked) object header\(report.objectsChecked == 1 ? "" : "s")\(readData ? "; read \(report.objectsReadInFull) object\(report.objectsReadInFull == 1 ? "" : "s") in full" : "").")
            for problem in report.notChecked { print("not checked: \(shown(problem.location)): \(problem.reason)") }
            for problem in report.damaged { print("damaged: \(shown(problem.location)): \(problem.reason)") }
            for item in report.garbage where !report.removed.contains(item) { print("garbage: \(item)") }
            for item in report.removed { print("removed: \(item)") }
            if report.isClean && report.damaged.isEmpty { print(report.garbage.isEmpty ? "The store is clean." : "The store is clean after repair.") }
        }
        if !report.damaged.isEmpty {
            throw CommandFailure(.integrity, "\(report.damaged.count) damaged entr\(report.damaged.count == 1 ? "y" : "ies") found",
                                 hint: "restore them from a copy, or remove them with 'locker rm'")
        }
        if report.garbage.count > report.removed.count {
            throw CommandFailure(.integrity, "\(report.garbage.count) leftover file\(report.garbage.count == 1 ? "" : "s") from interrupted writes",
                                 hint: "run 'locker verify --repair' to remove them")
        }
    }
}
