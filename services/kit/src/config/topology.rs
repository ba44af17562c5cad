//! The service topology: the five services, their binaries and gRPC names, default ports,
//! who depends on whom, and how each one is reached.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::{Config, ServiceConfig, StoreSpec};

/// The five services, in start-up order (dependencies first).
pub const SERVICES: [ServiceName; 5] = [
    ServiceName::Policy,
    ServiceName::Vaglio,
    ServiceName::Approval,
    ServiceName::Planner,
    ServiceName::Gateway,
];

/// One of the five Metnos services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceName {
    Policy,
    Vaglio,
    Approval,
    Planner,
    Gateway,
}

impl ServiceName {
    /// Short name: `policy`, also the config section and the SQLite file stem.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::Policy => "policy",
            ServiceName::Vaglio => "vaglio",
            ServiceName::Approval => "approval",
            ServiceName::Planner => "planner",
            ServiceName::Gateway => "gateway",
        }
    }

    /// Binary and OpenTelemetry service name: `metnos-policy`.
    pub fn binary(self) -> &'static str {
        match self {
            ServiceName::Policy => "metnos-policy",
            ServiceName::Vaglio => "metnos-vaglio",
            ServiceName::Approval => "metnos-approval",
            ServiceName::Planner => "metnos-planner",
            ServiceName::Gateway => "metnos-gateway",
        }
    }

    /// Fully qualified gRPC service name, as health and reflection report it.
    pub fn grpc_name(self) -> &'static str {
        use metnos_proto::service_names as n;
        match self {
            ServiceName::Policy => n::POLICY,
            ServiceName::Vaglio => n::VAGLIO,
            ServiceName::Approval => n::APPROVAL,
            ServiceName::Planner => n::PLANNER,
            ServiceName::Gateway => n::GATEWAY,
        }
    }

    /// Default loopback port.
    pub fn default_port(self) -> u16 {
        match self {
            ServiceName::Policy => 50051,
            ServiceName::Vaglio => 50052,
            ServiceName::Approval => 50053,
            ServiceName::Planner => 50054,
            ServiceName::Gateway => 50055,
        }
    }

    /// The services this one calls, whose health it watches at start-up.
    pub fn dependencies(self) -> &'static [ServiceName] {
        match self {
            ServiceName::Policy | ServiceName::Vaglio => &[],
            ServiceName::Approval => &[ServiceName::Policy],
            ServiceName::Planner => &[
                ServiceName::Policy,
                ServiceName::Vaglio,
                ServiceName::Approval,
            ],
            ServiceName::Gateway => &[
                ServiceName::Planner,
                ServiceName::Approval,
                ServiceName::Vaglio,
            ],
        }
    }

    /// Parses a short name.
    pub fn parse(name: &str) -> Option<ServiceName> {
        SERVICES.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Config {
    /// Where one service listens, how it is reached, where its store is.
    pub fn service(&self, service: ServiceName) -> ServiceConfig {
        match service {
            ServiceName::Policy => self.policy.clone(),
            ServiceName::Vaglio => ServiceConfig {
                listen: self.vaglio.listen,
                url: self.vaglio.url.clone(),
                store: self.vaglio.store.clone(),
            },
            ServiceName::Approval => ServiceConfig {
                listen: self.approval.listen,
                url: self.approval.url.clone(),
                store: self.approval.store.clone(),
            },
            ServiceName::Planner => self.planner.clone(),
            ServiceName::Gateway => self.gateway.clone(),
        }
    }

    /// Sets how clients reach a service (`metnos up` points peers at bound ports).
    pub fn set_service_url(&mut self, service: ServiceName, url: String) {
        match service {
            ServiceName::Policy => self.policy.url = url,
            ServiceName::Vaglio => self.vaglio.url = url,
            ServiceName::Approval => self.approval.url = url,
            ServiceName::Planner => self.planner.url = url,
            ServiceName::Gateway => self.gateway.url = url,
        }
    }

    /// How clients reach a service: its `url`, else `http://` + its listen address
    /// (an unspecified address such as 0.0.0.0 becomes loopback).
    pub fn service_url(&self, service: ServiceName) -> String {
        let section = self.service(service);
        if !section.url.is_empty() {
            return section.url;
        }
        url_for_addr(section.listen)
    }

    /// The store of one service, resolved against the data directory.
    pub fn store(&self, service: ServiceName) -> StoreSpec {
        StoreSpec::parse(&self.service(service).store, &self.data_dir, service)
            .expect("validated at load")
    }
}

/// `http://` URL for a bound address; an unspecified IP becomes loopback.
pub fn url_for_addr(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => IpAddr::from([127, 0, 0, 1]),
        ip if ip.is_unspecified() => IpAddr::from(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::test_env::{load, load_err, with_env};

    #[test]
    fn defaults_give_five_loopback_services_and_sqlite_under_the_data_dir() {
        with_env(&[], |_| {
            let config = load()?;
            assert_eq!(
                config.data_dir,
                PathBuf::from("/home/u/.local/share/metnos")
            );
            assert_eq!(
                config.service_url(ServiceName::Policy),
                "http://127.0.0.1:50051"
            );
            assert_eq!(
                config.service_url(ServiceName::Gateway),
                "http://127.0.0.1:50055"
            );
            assert_eq!(
                config.store(ServiceName::Approval),
                StoreSpec::Sqlite {
                    path: PathBuf::from("/home/u/.local/share/metnos/approval.db")
                }
            );
            assert_eq!(config.runtime.user_home, PathBuf::from("/home/u"));
            config.check_distinct_listen().map_err(|e| e.to_string())
        });
    }

    #[test]
    fn service_urls_may_be_dns_targets_for_client_side_balancing() {
        with_env(
            &[("METNOS_VAGLIO__URL", "dns:///metnos-vaglio-pods:50052")],
            |_| {
                let config = load()?;
                assert_eq!(
                    config.service_url(ServiceName::Vaglio),
                    "dns:///metnos-vaglio-pods:50052"
                );
                Ok(())
            },
        );
        with_env(
            &[("METNOS_VAGLIO__URL", "dns:///metnos-vaglio-pods")],
            |_| {
                let error = load_err();
                assert!(
                    error.contains("vaglio.url") && error.contains("dns:///host:port"),
                    "{error}"
                );
                Ok(())
            },
        );
        with_env(
            &[
                ("METNOS_RUNTIME__LLM__FAST__PROVIDER", "ollama"),
                ("METNOS_RUNTIME__LLM__FAST__MODEL", "m"),
                ("METNOS_RUNTIME__LLM__FAST__BASE_URL", "dns:///ollama:11434"),
            ],
            |_| {
                // Only service URLs: an LLM is reached over plain HTTP.
                assert!(load_err().contains("runtime.llm.fast.base_url"));
                Ok(())
            },
        );
    }

    #[test]
    fn env_overrides_listen_and_store() {
        with_env(
            &[
                ("METNOS_POLICY__LISTEN", "127.0.0.1:6000"),
                (
                    "METNOS_POLICY__STORE",
                    "postgres://metnos:s3cret@db:5432/policy",
                ),
            ],
            |_| {
                let config = load()?;
                assert_eq!(config.policy.listen.port(), 6000);
                assert_eq!(
                    config.service_url(ServiceName::Policy),
                    "http://127.0.0.1:6000"
                );
                assert_eq!(
                    config.store(ServiceName::Policy).describe(),
                    "postgres://metnos:***@db:5432/policy"
                );
                Ok(())
            },
        );
    }

    #[test]
    fn unspecified_listen_addresses_are_reached_on_loopback() {
        assert_eq!(
            url_for_addr("0.0.0.0:7".parse().unwrap()),
            "http://127.0.0.1:7"
        );
        assert_eq!(url_for_addr("[::]:7".parse().unwrap()), "http://[::1]:7");
    }
}
