from infra.cli import main

raise SystemExit(main())
