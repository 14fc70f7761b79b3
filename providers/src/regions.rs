//! A cloud's regions with coordinates, and the nearest one to a place: Route53 latency
//! records need an AWS region and Cloud DNS geo items a Google Cloud region, so a cluster
//! elsewhere is given the region nearest to it. Each cloud's table is in its module
//! (`route53::regions`, `clouddns::regions`).

use fedingress_dns::Location;
use fedingress_dns::routing::distance_km;

/// (region, latitude, longitude) rows: the city the cloud names for the region (clouds
/// do not publish data-centre positions), close enough for "nearest region".
pub struct RegionTable(pub &'static [(&'static str, f64, f64)]);

impl RegionTable {
    /// Whether `region` is in the table.
    pub fn contains(&self, region: &str) -> bool {
        self.0.iter().any(|(r, ..)| *r == region)
    }

    /// Where `region` is, if it is in the table.
    pub fn location(&self, region: &str) -> Option<Location> {
        self.0
            .iter()
            .find(|(r, ..)| *r == region)
            .map(|&(r, latitude, longitude)| Location {
                region: r.to_string(),
                latitude,
                longitude,
            })
    }

    /// The region nearest to `at` by great-circle distance; the first in the table on a
    /// tie, so the choice is stable.
    pub fn nearest(&self, at: &Location) -> &'static str {
        let mut best = self.0[0].0;
        let mut best_km = f64::INFINITY;
        for &(region, latitude, longitude) in self.0 {
            let km = distance_km(
                at,
                &Location {
                    region: String::new(),
                    latitude,
                    longitude,
                },
            );
            if km < best_km {
                best = region;
                best_km = km;
            }
        }
        best
    }
}
