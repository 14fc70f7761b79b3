//! AWS regions with the coordinates of the metro area they serve from, for latency
//! records: a cluster that does not run on AWS gets the AWS region nearest to it.
//!
//! The list is the set of regions Route53 accepts in a latency record
//! (`ResourceRecordSetRegion` in aws-sdk-route53 1.132) minus the China regions, which
//! live in a separate partition with a Route53 of their own. Coordinates are the city
//! AWS names for the region (AWS does not publish data-centre positions): close enough
//! for "nearest region", which is all they are used for.

use crate::regions::RegionTable;

/// (region, latitude, longitude).
pub const REGIONS: RegionTable = RegionTable(&[
    ("af-south-1", -33.92, 18.42),      // Cape Town
    ("ap-east-1", 22.32, 114.17),       // Hong Kong
    ("ap-east-2", 25.03, 121.57),       // Taipei
    ("ap-northeast-1", 35.68, 139.69),  // Tokyo
    ("ap-northeast-2", 37.57, 126.98),  // Seoul
    ("ap-northeast-3", 34.69, 135.50),  // Osaka
    ("ap-south-1", 19.08, 72.88),       // Mumbai
    ("ap-south-2", 17.39, 78.49),       // Hyderabad
    ("ap-southeast-1", 1.35, 103.82),   // Singapore
    ("ap-southeast-2", -33.87, 151.21), // Sydney
    ("ap-southeast-3", -6.21, 106.85),  // Jakarta
    ("ap-southeast-4", -37.81, 144.96), // Melbourne
    ("ap-southeast-5", 3.139, 101.687), // Kuala Lumpur
    ("ap-southeast-6", -36.85, 174.76), // Auckland
    ("ap-southeast-7", 13.76, 100.50),  // Bangkok
    ("ca-central-1", 45.50, -73.57),    // Montreal
    ("ca-west-1", 51.05, -114.07),      // Calgary
    ("eu-central-1", 50.11, 8.68),      // Frankfurt
    ("eu-central-2", 47.37, 8.54),      // Zurich
    ("eu-north-1", 59.33, 18.07),       // Stockholm
    ("eu-south-1", 45.46, 9.19),        // Milan
    ("eu-south-2", 41.65, -0.89),       // Aragón (Zaragoza)
    ("eu-west-1", 53.35, -6.26),        // Dublin
    ("eu-west-2", 51.51, -0.13),        // London
    ("eu-west-3", 48.86, 2.35),         // Paris
    ("il-central-1", 32.09, 34.78),     // Tel Aviv
    ("me-central-1", 25.20, 55.27),     // UAE (Dubai)
    ("me-south-1", 26.23, 50.59),       // Bahrain
    ("mx-central-1", 20.59, -100.39),   // Querétaro
    ("sa-east-1", -23.55, -46.63),      // São Paulo
    ("us-east-1", 39.04, -77.49),       // N. Virginia (Ashburn)
    ("us-east-2", 39.96, -83.00),       // Ohio (Columbus)
    ("us-west-1", 37.77, -122.42),      // N. California (San Francisco)
    ("us-west-2", 45.84, -119.70),      // Oregon (Boardman)
]);

#[cfg(test)]
mod tests {
    use fedingress_dns::Location;

    use super::*;

    fn at(latitude: f64, longitude: f64) -> Location {
        Location {
            region: "x".into(),
            latitude,
            longitude,
        }
    }

    #[test]
    fn nearest_regions_of_some_cities() {
        assert_eq!(REGIONS.nearest(&at(50.11, 8.68)), "eu-central-1"); // Frankfurt
        assert_eq!(REGIONS.nearest(&at(48.14, 11.58)), "eu-central-2"); // Munich → Zurich
        assert_eq!(REGIONS.nearest(&at(40.71, -74.01)), "us-east-1"); // New York
        assert_eq!(REGIONS.nearest(&at(47.61, -122.33)), "us-west-2"); // Seattle
        assert_eq!(REGIONS.nearest(&at(28.61, 77.21)), "ap-south-1"); // Delhi → Mumbai
        assert_eq!(REGIONS.nearest(&at(12.97, 77.59)), "ap-south-2"); // Bangalore → Hyderabad
        assert_eq!(REGIONS.nearest(&at(-34.60, -58.38)), "sa-east-1"); // Buenos Aires
    }

    #[test]
    fn the_table_is_sorted_and_within_range() {
        assert!(REGIONS.0.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(
            REGIONS
                .0
                .iter()
                .all(|&(_, lat, lon)| lat.abs() <= 90.0 && lon.abs() <= 180.0)
        );
        assert!(REGIONS.contains("eu-west-1") && !REGIONS.contains("europe-west1"));
    }
}
