"""Execute: cloud drivers (cloud, ec2, openstack, retry), worker contextualization (userdata), condor control."""
