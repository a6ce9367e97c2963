"""Looking at data and models: dataset scans, class weights, parameter and FLOP counts."""
