//! What the command line configures: the driver's identity, capabilities and sizes, checked and
//! parsed purely.

use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown capability {0:?} (known: stage, stats, expand, condition)")]
    UnknownCapability(String),
    #[error("--topology {0:?} is not key=value")]
    Topology(String),
    #[error("--supported-versions is empty")]
    NoVersions,
    #[error("--driver-name is empty")]
    NoName,
    #[error("--volume-capacity must be positive and fit in an int64")]
    Capacity,
}

/// The node service capabilities `--capabilities` turns on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub stage: bool,
    pub stats: bool,
    pub expand: bool,
    pub condition: bool,
}

pub fn parse_capabilities(list: &str) -> Result<Capabilities, ConfigError> {
    let mut caps = Capabilities::default();
    for item in list
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        match item {
            "stage" => caps.stage = true,
            "stats" => caps.stats = true,
            "expand" => caps.expand = true,
            "condition" => caps.condition = true,
            other => return Err(ConfigError::UnknownCapability(other.to_string())),
        }
    }
    Ok(caps)
}

pub fn parse_topology(pairs: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
            _ => Err(ConfigError::Topology(pair.clone())),
        })
        .collect()
}

pub fn parse_versions(list: &str) -> Result<Vec<String>, ConfigError> {
    let versions: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
        .collect();
    if versions.is_empty() {
        return Err(ConfigError::NoVersions);
    }
    Ok(versions)
}

#[derive(Debug, Clone)]
pub struct Config {
    pub driver_name: String,
    pub node_id: String,
    pub csi_socket: PathBuf,
    pub capabilities: Capabilities,
    pub max_volumes: i64,
    pub topology: BTreeMap<String, String>,
    pub supported_versions: Vec<String>,
    /// Each volume's size until NodeExpandVolume changes it.
    pub volume_capacity: u64,
    /// NodePublishVolume is journaled and never answered (a driver hung in a mount), the
    /// driver's other calls going on.
    pub hang_publish: bool,
}

impl Config {
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.driver_name.is_empty() {
            return Err(ConfigError::NoName);
        }
        if self.volume_capacity == 0 || i64::try_from(self.volume_capacity).is_err() {
            return Err(ConfigError::Capacity);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_lists() {
        let all = Capabilities {
            stage: true,
            stats: true,
            expand: true,
            condition: true,
        };
        let cases: &[(&str, Result<Capabilities, ConfigError>)] = &[
            ("", Ok(Capabilities::default())),
            (
                "stage,stats,expand",
                Ok(Capabilities {
                    condition: false,
                    ..all
                }),
            ),
            (
                " stats , condition",
                Ok(Capabilities {
                    stats: true,
                    condition: true,
                    ..Capabilities::default()
                }),
            ),
            ("stage,stats,expand,condition", Ok(all)),
            (
                "stage,snapshot",
                Err(ConfigError::UnknownCapability("snapshot".into())),
            ),
        ];
        for (list, want) in cases {
            assert_eq!(&parse_capabilities(list), want, "{list}");
        }
    }

    #[test]
    fn topology_and_versions() {
        let topology = parse_topology(&["zone=a".into(), "rack=r=1".into()]).unwrap();
        assert_eq!(topology["zone"], "a");
        assert_eq!(topology["rack"], "r=1");
        assert_eq!(
            parse_topology(&["zone".into()]),
            Err(ConfigError::Topology("zone".into()))
        );
        assert_eq!(
            parse_topology(&["=a".into()]),
            Err(ConfigError::Topology("=a".into()))
        );
        assert_eq!(parse_versions("1.0.0, 2.0.0").unwrap(), ["1.0.0", "2.0.0"]);
        assert_eq!(parse_versions(" ,"), Err(ConfigError::NoVersions));
    }
}
