from s3.cli import main

main()
