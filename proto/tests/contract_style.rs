//! The contracts follow buf's style (STYLE.md 4-5), checked on the proto sources and on
//! the compiled descriptors: one `metnos.<svc>.v1` package per file, `XRequest` /
//! `XResponse` per RPC, enums starting at `_UNSPECIFIED = 0`, and a comment on every RPC
//! that says what it guarantees or which errors it returns.

use prost::Message;
use prost_types::FileDescriptorSet;

fn descriptors() -> FileDescriptorSet {
    FileDescriptorSet::decode(metnos_proto::FILE_DESCRIPTOR_SET).unwrap()
}

fn metnos_files() -> Vec<prost_types::FileDescriptorProto> {
    descriptors()
        .file
        .into_iter()
        .filter(|f| f.package().starts_with("metnos."))
        .collect()
}

#[test]
fn each_service_has_its_own_versioned_package() {
    let mut packages: Vec<String> = metnos_files()
        .iter()
        .map(|f| f.package().to_owned())
        .collect();
    packages.sort();
    assert_eq!(
        packages,
        [
            "metnos.approval.v1",
            "metnos.common.v1",
            "metnos.gateway.v1",
            "metnos.planner.v1",
            "metnos.policy.v1",
            "metnos.vaglio.v1"
        ]
    );
    for file in metnos_files() {
        let segment = file.package().split('.').nth(1).unwrap().to_owned();
        assert_eq!(
            file.name(),
            format!("metnos/{segment}/v1/{segment}.proto"),
            "file path follows the package"
        );
        for service in &file.service {
            let mut expected = segment.clone();
            expected[..1].make_ascii_uppercase();
            assert_eq!(service.name(), format!("{expected}Service"));
        }
    }
}

#[test]
fn every_rpc_has_its_own_request_and_response_messages() {
    for file in metnos_files() {
        for service in &file.service {
            for method in &service.method {
                let name = method.name();
                let package = file.package();
                assert_eq!(
                    method.input_type(),
                    format!(".{package}.{name}Request"),
                    "{name}"
                );
                assert_eq!(
                    method.output_type(),
                    format!(".{package}.{name}Response"),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn every_enum_starts_with_unspecified_zero() {
    fn check(enum_type: &prost_types::EnumDescriptorProto) {
        let first = &enum_type.value[0];
        assert_eq!(first.number(), 0, "{}", enum_type.name());
        assert!(
            first.name().ends_with("_UNSPECIFIED"),
            "{}: {}",
            enum_type.name(),
            first.name()
        );
    }
    fn walk(message: &prost_types::DescriptorProto) {
        message.enum_type.iter().for_each(check);
        message.nested_type.iter().for_each(walk);
    }
    for file in metnos_files() {
        file.enum_type.iter().for_each(check);
        file.message_type.iter().for_each(walk);
    }
}

#[test]
fn every_rpc_is_documented_with_its_errors_or_guarantees() {
    let sources = [
        include_str!("../metnos/policy/v1/policy.proto"),
        include_str!("../metnos/vaglio/v1/vaglio.proto"),
        include_str!("../metnos/approval/v1/approval.proto"),
        include_str!("../metnos/planner/v1/planner.proto"),
        include_str!("../metnos/gateway/v1/gateway.proto"),
    ];
    let mut rpcs = 0;
    for source in sources {
        let lines: Vec<&str> = source.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            if !line.starts_with("rpc ") {
                continue;
            }
            rpcs += 1;
            let comment: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("//"))
                .collect();
            let text = comment.join(" ");
            assert!(!comment.is_empty(), "undocumented: {line}");
            assert!(text.contains("Errors:"), "no Errors: line for {line}");
        }
    }
    assert_eq!(rpcs, 56);
}
